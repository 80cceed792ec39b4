// SPDX-License-Identifier: BSD-3-Clause
// The load generator of store_perf: see store_load.hpp.
#include "store_load.hpp"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/epoll.h>
#include <sys/ioctl.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <mutex>
#include <thread>

namespace store_load {
namespace {

using Clock = std::chrono::steady_clock;

constexpr std::uint8_t kOpSet = 1, kOpGet = 2, kOpAdd = 3;

void put_u32(std::vector<std::uint8_t>& out, std::uint32_t v) {
  for (int i = 0; i < 4; ++i) {
    out.push_back(static_cast<std::uint8_t>(v >> (8 * i)));
  }
}
void put_u64(std::vector<std::uint8_t>& out, std::uint64_t v) {
  for (int i = 0; i < 8; ++i) {
    out.push_back(static_cast<std::uint8_t>(v >> (8 * i)));
  }
}
void put_str(std::vector<std::uint8_t>& out, const std::string& s) {
  put_u32(out, static_cast<std::uint32_t>(s.size()));
  out.insert(out.end(), s.begin(), s.end());
}
std::uint32_t get_u32(const std::uint8_t* p) {
  return static_cast<std::uint32_t>(p[0]) | (static_cast<std::uint32_t>(p[1]) << 8) |
         (static_cast<std::uint32_t>(p[2]) << 16) | (static_cast<std::uint32_t>(p[3]) << 24);
}

// One request (a whole frame, or a RESP command) appended to out.
void encode(Proto proto, Op op, const std::string& key, std::uint32_t id,
            std::vector<std::uint8_t>& out) {
  const std::string value = "xxx";  // 3 bytes, as redis-benchmark -d 3
  if (proto == Proto::resp) {
    std::string cmd;
    auto arg = [&](const std::string& a) {
      cmd += "$" + std::to_string(a.size()) + "\r\n" + a + "\r\n";
    };
    if (op == Op::set) {
      cmd = "*3\r\n";
      arg("SET");
      arg(key);
      arg(value);
    } else if (op == Op::get) {
      cmd = "*2\r\n";
      arg("GET");
      arg(key);
    } else {
      cmd = "*2\r\n";
      arg("INCR");
      arg("counter");
    }
    out.insert(out.end(), cmd.begin(), cmd.end());
    return;
  }
  std::vector<std::uint8_t> body;
  if (op == Op::set) {
    body.push_back(kOpSet);
    put_u32(body, id);
    put_str(body, key);
    put_str(body, value);
  } else if (op == Op::get) {
    body.push_back(kOpGet);
    put_u32(body, id);
    put_u64(body, 0);  // timeout_ms: answer at once
    put_str(body, key);
  } else {
    body.push_back(kOpAdd);
    put_u32(body, id);
    put_str(body, "counter");
    put_u64(body, 1);
  }
  put_u32(out, static_cast<std::uint32_t>(body.size()));
  out.insert(out.end(), body.begin(), body.end());
}

// Length of the first complete reply in [p, p+n): 0 = incomplete; -1 = an error reply or bytes
// that are no reply.
long reply_length(Proto proto, const std::uint8_t* p, std::size_t n) {
  if (proto == Proto::chorus) {
    if (n < 4) {
      return 0;
    }
    const std::size_t len = get_u32(p);
    if (n < 4 + len) {
      return 0;
    }
    return len >= 5 && p[4] == 0 ? static_cast<long>(4 + len) : -1;  // status ok
  }
  if (n == 0) {
    return 0;
  }
  const auto* crlf = static_cast<const std::uint8_t*>(std::memchr(p, '\n', n));
  if (crlf == nullptr) {
    return 0;
  }
  const std::size_t line = static_cast<std::size_t>(crlf - p) + 1;
  switch (p[0]) {
    case '+':
    case ':':
      return static_cast<long>(line);
    case '$': {
      const long len = std::strtol(reinterpret_cast<const char*>(p) + 1, nullptr, 10);
      if (len < 0) {
        return static_cast<long>(line);  // nil
      }
      const std::size_t total = line + static_cast<std::size_t>(len) + 2;
      return n < total ? 0 : static_cast<long>(total);
    }
    default:
      return -1;
  }
}

bool write_all(int fd, const std::uint8_t* p, std::size_t n) {
  while (n > 0) {
    const ssize_t w = ::send(fd, p, n, MSG_NOSIGNAL);
    if (w < 0) {
      if (errno == EAGAIN || errno == EWOULDBLOCK) {
        pollfd pfd{fd, POLLOUT, 0};
        if (::poll(&pfd, 1, 10000) != 1) {
          return false;
        }
        continue;
      }
      if (errno == EINTR) {
        continue;
      }
      return false;
    }
    p += w;
    n -= static_cast<std::size_t>(w);
  }
  return true;
}

// Reads until `count` whole replies arrived on a blocking-or-not socket (setup paths only).
bool await_replies(Proto proto, int fd, int count, std::string& error) {
  std::vector<std::uint8_t> buf;
  std::size_t used = 0;
  while (count > 0) {
    long len;
    while (count > 0 && (len = reply_length(proto, buf.data() + used, buf.size() - used)) != 0) {
      if (len < 0) {
        error = "the server answered with an error";
        return false;
      }
      used += static_cast<std::size_t>(len);
      --count;
    }
    if (count == 0) {
      break;
    }
    pollfd pfd{fd, POLLIN, 0};
    if (::poll(&pfd, 1, 30000) != 1) {
      error = "no reply within 30 s";
      return false;
    }
    std::uint8_t tmp[4096];
    const ssize_t r = ::recv(fd, tmp, sizeof(tmp), 0);
    if (r <= 0) {
      if (r < 0 && (errno == EAGAIN || errno == EINTR)) {
        continue;
      }
      error = "the server closed the connection";
      return false;
    }
    buf.insert(buf.end(), tmp, tmp + r);
  }
  return true;
}

// Opens n connections to 127.0.0.1:port in groups (the listen backlog is finite); chorus
// connections complete the handshake. Non-blocking sockets with TCP_NODELAY, as hiredis does.
bool connect_many(Proto proto, std::uint16_t port, int n, std::vector<int>& fds,
                  std::string& error) {
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(port);
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  constexpr int kGroup = 256;
  for (int first = 0; first < n; first += kGroup) {
    const int last = std::min(n, first + kGroup);
    for (int i = first; i < last; ++i) {
      const int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
      if (fd < 0) {
        error = std::string("socket: ") + std::strerror(errno);
        return false;
      }
      fds.push_back(fd);
      if (::connect(fd, reinterpret_cast<const sockaddr*>(&addr), sizeof(addr)) != 0) {
        error = std::string("connect: ") + std::strerror(errno);
        return false;
      }
      const int one = 1;
      ::setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
      if (proto == Proto::chorus) {
        const std::uint8_t hello[8] = {'C', 'H', 'S', 'T', 1, 0, 0, 0};
        if (!write_all(fd, hello, sizeof(hello))) {
          error = "sending the hello failed";
          return false;
        }
      }
    }
    if (proto == Proto::chorus) {
      for (int i = first; i < last; ++i) {
        std::uint8_t answer[8];
        std::size_t got = 0;
        while (got < sizeof(answer)) {
          pollfd pfd{fds[static_cast<std::size_t>(i)], POLLIN, 0};
          if (::poll(&pfd, 1, 30000) != 1) {
            error = "no hello answer within 30 s";
            return false;
          }
          const ssize_t r = ::recv(pfd.fd, answer + got, sizeof(answer) - got, 0);
          if (r <= 0) {
            error = "the server closed the connection during the handshake";
            return false;
          }
          got += static_cast<std::size_t>(r);
        }
        if (std::memcmp(answer, "CHST", 4) != 0 || answer[6] != 0 || answer[7] != 0) {
          error = "the server refused the handshake";
          return false;
        }
      }
    }
  }
  for (int fd : fds) {
    const int flags = 1;
    ::ioctl(fd, FIONBIO, &flags);
  }
  return true;
}

void close_all(std::vector<int>& fds) {
  for (int fd : fds) {
    ::close(fd);
  }
  fds.clear();
}

double thread_cpu_seconds() {
  rusage ru{};
  ::getrusage(RUSAGE_THREAD, &ru);
  return static_cast<double>(ru.ru_utime.tv_sec + ru.ru_stime.tv_sec) +
         static_cast<double>(ru.ru_utime.tv_usec + ru.ru_stime.tv_usec) * 1e-6;
}

struct LoadConn {
  int fd = -1;
  std::vector<std::uint8_t> batch;  // P requests, sent with one write
  long batches_left = 0;
  int awaiting = 0;  // replies of the current batch still to come
  std::vector<std::uint8_t> in;
  std::size_t in_used = 0;
};

}  // namespace

const char* op_name(Op op) {
  switch (op) {
    case Op::set:
      return "set";
    case Op::get:
      return "get";
    case Op::add:
      return "add";
  }
  return "?";
}

Result run(const Spec& spec) {
  Result result;
  const int conns = std::max(1, spec.connections);
  const int pipeline = std::max(1, spec.pipeline);
  const long batches_per_conn = std::max<long>(1, spec.ops / (static_cast<long>(conns) * pipeline));
  std::vector<int> fds;
  if (!connect_many(spec.proto, spec.port, conns, fds, result.error)) {
    close_all(fds);
    return result;
  }
  std::vector<LoadConn> cs(static_cast<std::size_t>(conns));
  for (int i = 0; i < conns; ++i) {
    LoadConn& c = cs[static_cast<std::size_t>(i)];
    c.fd = fds[static_cast<std::size_t>(i)];
    const std::string key = "k/" + std::to_string(i);
    for (int p = 0; p < pipeline; ++p) {
      encode(spec.proto, spec.op, key, static_cast<std::uint32_t>(p + 1), c.batch);
    }
    c.batches_left = batches_per_conn;
    c.in.resize(64 * 1024);
    if (spec.op == Op::get) {
      std::vector<std::uint8_t> set;
      encode(spec.proto, Op::set, key, 1, set);
      if (!write_all(c.fd, set.data(), set.size()) ||
          !await_replies(spec.proto, c.fd, 1, result.error)) {
        close_all(fds);
        return result;
      }
    }
  }

  const int threads = std::clamp(spec.threads, 1, conns);
  std::mutex mu;
  std::condition_variable cv;
  int ready = 0;
  bool go = false;
  Clock::time_point start;
  std::vector<Clock::time_point> ends(static_cast<std::size_t>(threads));
  std::vector<double> cpu(static_cast<std::size_t>(threads));
  std::vector<std::string> errors(static_cast<std::size_t>(threads));
  std::atomic<long> replies{0};
  auto body = [&](int t) {
    const int first = conns * t / threads;
    const int last = conns * (t + 1) / threads;
    const int ep = ::epoll_create1(EPOLL_CLOEXEC);
    for (int i = first; i < last; ++i) {
      epoll_event ev{};
      ev.events = EPOLLIN;
      ev.data.u32 = static_cast<std::uint32_t>(i);
      ::epoll_ctl(ep, EPOLL_CTL_ADD, cs[static_cast<std::size_t>(i)].fd, &ev);
    }
    {
      std::unique_lock<std::mutex> lock(mu);
      ++ready;
      cv.notify_all();
      cv.wait(lock, [&] { return go; });
    }
    const double cpu0 = thread_cpu_seconds();
    long mine = 0;
    int active = last - first;
    std::string& error = errors[static_cast<std::size_t>(t)];
    auto send_batch = [&](LoadConn& c) {
      c.awaiting = pipeline;
      --c.batches_left;
      if (!write_all(c.fd, c.batch.data(), c.batch.size())) {
        error = "send failed";
        return false;
      }
      return true;
    };
    for (int i = first; i < last && error.empty(); ++i) {
      send_batch(cs[static_cast<std::size_t>(i)]);
    }
    std::vector<epoll_event> events(1024);
    while (active > 0 && error.empty()) {
      const int n = ::epoll_wait(ep, events.data(), static_cast<int>(events.size()), 30000);
      if (n <= 0) {
        if (n < 0 && errno == EINTR) {
          continue;
        }
        error = "no reply for 30 s";
        break;
      }
      for (int e = 0; e < n && error.empty(); ++e) {
        LoadConn& c = cs[events[static_cast<std::size_t>(e)].data.u32];
        if (c.in.size() - c.in_used < 16 * 1024) {
          c.in.resize(c.in.size() * 2);
        }
        const ssize_t r = ::recv(c.fd, c.in.data() + c.in_used, c.in.size() - c.in_used, 0);
        if (r <= 0) {
          if (r < 0 && (errno == EAGAIN || errno == EINTR)) {
            continue;
          }
          error = "the server closed a connection";
          break;
        }
        c.in_used += static_cast<std::size_t>(r);
        std::size_t at = 0;
        long len;
        while ((len = reply_length(spec.proto, c.in.data() + at, c.in_used - at)) != 0) {
          if (len < 0) {
            error = "the server answered with an error";
            break;
          }
          at += static_cast<std::size_t>(len);
          ++mine;
          --c.awaiting;
        }
        if (at > 0) {
          std::memmove(c.in.data(), c.in.data() + at, c.in_used - at);
          c.in_used -= at;
        }
        if (c.awaiting == 0) {
          if (c.batches_left > 0) {
            send_batch(c);
          } else {
            --active;
          }
        }
      }
    }
    ends[static_cast<std::size_t>(t)] = Clock::now();
    cpu[static_cast<std::size_t>(t)] = thread_cpu_seconds() - cpu0;
    replies += mine;
    ::close(ep);
  };
  std::vector<std::thread> pool;
  for (int t = 0; t < threads; ++t) {
    pool.emplace_back(body, t);
  }
  {
    std::unique_lock<std::mutex> lock(mu);
    cv.wait(lock, [&] { return ready == threads; });
    if (spec.at_start) {
      spec.at_start();
    }
    start = Clock::now();
    go = true;
  }
  cv.notify_all();
  for (auto& th : pool) {
    th.join();
  }
  if (spec.at_end) {
    spec.at_end();
  }
  close_all(fds);
  for (const auto& e : errors) {
    if (!e.empty()) {
      result.error = e;
      return result;
    }
  }
  const auto end = *std::max_element(ends.begin(), ends.end());
  result.ok = true;
  result.ops = replies.load();
  result.seconds = std::chrono::duration<double>(end - start).count();
  for (double c : cpu) {
    result.cpu_seconds += c;
  }
  return result;
}

IdleClients::IdleClients(Proto proto, std::uint16_t port, int connections) : proto_(proto) {
  if (!connect_many(proto, port, connections, fds_, error_)) {
    close_all(fds_);
  }
}

IdleClients::~IdleClients() { close_all(fds_); }

bool IdleClients::act() {
  constexpr std::size_t kGroup = 512;
  for (std::size_t first = 0; first < fds_.size(); first += kGroup) {
    const std::size_t last = std::min(fds_.size(), first + kGroup);
    for (std::size_t i = first; i < last; ++i) {
      std::vector<std::uint8_t> req;
      encode(proto_, Op::set, "idle/" + std::to_string(i), 1, req);
      if (!write_all(fds_[i], req.data(), req.size())) {
        error_ = "send failed";
        return false;
      }
    }
    for (std::size_t i = first; i < last; ++i) {
      if (!await_replies(proto_, fds_[i], 1, error_)) {
        return false;
      }
    }
  }
  return true;
}

Rss read_rss(pid_t pid) {
  Rss out;
  std::ifstream f("/proc/" + std::to_string(pid) + "/status");
  std::string line;
  while (std::getline(f, line)) {
    if (line.rfind("VmRSS:", 0) == 0) {
      out.rss_kib = std::atol(line.c_str() + 6);
    } else if (line.rfind("VmHWM:", 0) == 0) {
      out.hwm_kib = std::atol(line.c_str() + 6);
    }
  }
  return out;
}

}  // namespace store_load
