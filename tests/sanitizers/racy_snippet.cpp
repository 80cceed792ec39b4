// SPDX-License-Identifier: BSD-3-Clause
// A deliberate finding for the sanitizer in this build, so that the harness can check that
// reports name files and lines (check_report.sh): under ThreadSanitizer two threads write one
// int with no ordering; under AddressSanitizer a read after free. Not part of the suite's code
// under test: it only has to be found.
#include <cstdio>
#include <thread>

namespace {

int shared_counter = 0;

void bump() {
  shared_counter += 1;  // finding (thread): the report must name this line
}

}  // namespace

int main() {
#if RACY_SNIPPET_THREAD  // set by meson.build in a ThreadSanitizer build
  std::thread a(bump);
  std::thread b(bump);
  a.join();
  b.join();
  std::printf("%d\n", shared_counter);
#else
  int* freed = new int(1);
  delete freed;
  shared_counter = *freed;  // finding (address): the report must name this line
  bump();
#endif
  return 0;
}
