// SPDX-License-Identifier: BSD-3-Clause
// Placeholder: replaced when this tool lands.
#include <cstdio>
int main() {
  std::fputs("not implemented yet\n", stderr);
  return 2;
}
