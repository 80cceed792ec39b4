// SPDX-License-Identifier: BSD-3-Clause
// Line relay of the ranks' output, with prefixes only where more than one rank writes.
#include "chorusrun_relay.hpp"

#include <unistd.h>

#include <cerrno>

namespace chorusrun {

void write_all(int fd, std::string_view data) {
  while (!data.empty()) {
    const ssize_t n = ::write(fd, data.data(), data.size());
    if (n < 0 && errno == EINTR) {
      continue;
    }
    if (n <= 0) {
      return;  // console gone (EPIPE): the ranks' output is dropped, the run goes on
    }
    data.remove_prefix(static_cast<std::size_t>(n));
  }
}

void say(const std::string& text) { write_all(2, "chorusrun: " + text + "\n"); }

bool Relay::drain(int rank, OutputStream& s) {
  char buf[65536];
  while (s.fd >= 0) {
    const ssize_t n = ::read(s.fd, buf, sizeof(buf));
    if (n > 0) {
      feed(rank, s, std::string_view(buf, static_cast<std::size_t>(n)));
      continue;
    }
    if (n < 0 && errno == EINTR) {
      continue;
    }
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
      return true;
    }
    finish(rank, s);  // EOF or error
    ::close(s.fd);
    s.fd = -1;
  }
  return false;
}

void Relay::close(int rank, OutputStream& s) {
  if (s.fd >= 0) {
    drain(rank, s);
  }
  if (s.fd >= 0) {
    finish(rank, s);
    ::close(s.fd);
    s.fd = -1;
  }
  if (s.log >= 0) {
    ::close(s.log);
    s.log = -1;
  }
}

void Relay::feed(int rank, OutputStream& s, std::string_view data) {
  s.partial.append(data);
  std::size_t start = 0;
  for (;;) {
    const auto nl = s.partial.find('\n', start);
    if (nl == std::string::npos) {
      break;
    }
    emit(rank, s, std::string_view(s.partial).substr(start, nl + 1 - start));
    start = nl + 1;
  }
  s.partial.erase(0, start);
  if (s.partial.size() > kMaxLine) {
    s.partial.push_back('\n');
    emit(rank, s, s.partial);
    s.partial.clear();
  }
}

void Relay::finish(int rank, OutputStream& s) {
  if (!s.partial.empty()) {
    s.partial.push_back('\n');
    emit(rank, s, s.partial);
    s.partial.clear();
  }
}

// automatic: the first rank to write to a console stream writes bare lines; when a second
// rank writes to it, a note says whose the bare lines above were, and from then on every line
// on that stream is prefixed. Whether a rank will ever write cannot be known in advance, and
// re-labelling lines already written is impossible, so this is the earliest point at which a
// prefix tells the reader something.
bool Relay::prefixed(int rank, int console) {
  switch (mode_) {
    case PrefixMode::always:
      return true;
    case PrefixMode::never:
      return false;
    case PrefixMode::automatic:
      break;
  }
  if (first_writer_[console] < 0) {
    first_writer_[console] = rank;
  } else if (!shared_[console] && rank != first_writer_[console]) {
    shared_[console] = true;
    const std::string name = console == 1 ? "stdout" : "stderr";
    write_all(console, "chorusrun: rank " + std::to_string(rank) + " also writes to " + name +
                           ": lines are prefixed with \"[rank N] \" from here on; the " + name +
                           " lines above came from rank " + std::to_string(first_writer_[console]) +
                           "\n");
  }
  return shared_[console];
}

void Relay::emit(int rank, const OutputStream& s, std::string_view line) {
  if (s.log >= 0) {
    write_all(s.log, line);
  }
  if (s.console < 0) {
    return;
  }
  if (prefixed(rank, s.console)) {
    std::string out = "[rank " + std::to_string(rank) + "] ";
    out.append(line);
    write_all(s.console, out);  // one write per line: lines of ranks never interleave
  } else {
    write_all(s.console, line);
  }
}

}  // namespace chorusrun
