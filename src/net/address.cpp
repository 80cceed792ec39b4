// SPDX-License-Identifier: BSD-3-Clause
// SocketAddress formatting/parsing and getaddrinfo with a deadline.
#include "net/address.hpp"

#include <arpa/inet.h>
#include <netdb.h>
#include <netinet/in.h>

#include <algorithm>
#include <condition_variable>
#include <cstring>
#include <memory>
#include <mutex>
#include <thread>

#include <fmt/format.h>

#include <chorus/errors.hpp>

#include "core/format.hpp"

namespace chorus::net {

SocketAddress SocketAddress::from_sockaddr(const sockaddr* sa, socklen_t len) noexcept {
  SocketAddress a;
  if (sa == nullptr) {
    return a;
  }
  if (sa->sa_family == AF_INET && len >= static_cast<socklen_t>(sizeof(sockaddr_in))) {
    std::memcpy(&a.storage_, sa, sizeof(sockaddr_in));
    a.len_ = sizeof(sockaddr_in);
  } else if (sa->sa_family == AF_INET6 && len >= static_cast<socklen_t>(sizeof(sockaddr_in6))) {
    std::memcpy(&a.storage_, sa, sizeof(sockaddr_in6));
    a.len_ = sizeof(sockaddr_in6);
  }
  return a;
}

std::optional<SocketAddress> SocketAddress::parse_numeric(const std::string& host,
                                                          std::uint16_t port) {
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = AI_NUMERICHOST | AI_NUMERICSERV;
  addrinfo* res = nullptr;
  const std::string service = std::to_string(port);
  if (getaddrinfo(host.c_str(), service.c_str(), &hints, &res) != 0 || res == nullptr) {
    return std::nullopt;
  }
  SocketAddress a = from_sockaddr(res->ai_addr, res->ai_addrlen);
  freeaddrinfo(res);
  if (a.empty()) {
    return std::nullopt;
  }
  return a;
}

SocketAddress SocketAddress::any(int family, std::uint16_t port) noexcept {
  SocketAddress a;
  if (family == AF_INET6) {
    auto* s = reinterpret_cast<sockaddr_in6*>(&a.storage_);
    s->sin6_family = AF_INET6;
    s->sin6_addr = in6addr_any;
    a.len_ = sizeof(sockaddr_in6);
  } else {
    auto* s = reinterpret_cast<sockaddr_in*>(&a.storage_);
    s->sin_family = AF_INET;
    s->sin_addr.s_addr = htonl(INADDR_ANY);
    a.len_ = sizeof(sockaddr_in);
  }
  a.set_port(port);
  return a;
}

int SocketAddress::family() const noexcept { return len_ == 0 ? 0 : storage_.ss_family; }

std::uint16_t SocketAddress::port() const noexcept {
  if (family() == AF_INET) {
    return ntohs(reinterpret_cast<const sockaddr_in*>(&storage_)->sin_port);
  }
  if (family() == AF_INET6) {
    return ntohs(reinterpret_cast<const sockaddr_in6*>(&storage_)->sin6_port);
  }
  return 0;
}

void SocketAddress::set_port(std::uint16_t port) noexcept {
  if (family() == AF_INET) {
    reinterpret_cast<sockaddr_in*>(&storage_)->sin_port = htons(port);
  } else if (family() == AF_INET6) {
    reinterpret_cast<sockaddr_in6*>(&storage_)->sin6_port = htons(port);
  }
}

std::string SocketAddress::host() const {
  char buf[NI_MAXHOST] = {};
  if (len_ == 0 || getnameinfo(get(), len_, buf, sizeof(buf), nullptr, 0, NI_NUMERICHOST) != 0) {
    return "?";
  }
  return buf;
}

std::string SocketAddress::to_string() const {
  if (len_ == 0) {
    return "(no address)";
  }
  return format_host_port(host(), port());
}

bool SocketAddress::is_loopback() const noexcept {
  if (family() == AF_INET) {
    const auto addr = ntohl(reinterpret_cast<const sockaddr_in*>(&storage_)->sin_addr.s_addr);
    return (addr >> 24) == 127;
  }
  if (family() == AF_INET6) {
    const auto& a6 = reinterpret_cast<const sockaddr_in6*>(&storage_)->sin6_addr;
    if (IN6_IS_ADDR_LOOPBACK(&a6)) {
      return true;
    }
    return IN6_IS_ADDR_V4MAPPED(&a6) && a6.s6_addr[12] == 127;
  }
  return false;
}

bool SocketAddress::is_any() const noexcept {
  if (family() == AF_INET) {
    return reinterpret_cast<const sockaddr_in*>(&storage_)->sin_addr.s_addr == htonl(INADDR_ANY);
  }
  if (family() == AF_INET6) {
    const auto& a6 = reinterpret_cast<const sockaddr_in6*>(&storage_)->sin6_addr;
    return IN6_IS_ADDR_UNSPECIFIED(&a6);
  }
  return false;
}

bool operator==(const SocketAddress& a, const SocketAddress& b) noexcept {
  return a.len_ == b.len_ && std::memcmp(&a.storage_, &b.storage_, a.len_) == 0;
}

HostPort parse_host_port(std::string_view text) {
  auto bad = [&](const char* why) {
    return InvalidArgument(
        fmt::format("'{}' is not a valid address: {}; use host:port, 1.2.3.4:port or [v6addr]:port",
                    text, why));
  };
  HostPort hp;
  std::string_view port_text;
  if (!text.empty() && text.front() == '[') {
    const auto close = text.find(']');
    if (close == std::string_view::npos) {
      throw bad("missing ']'");
    }
    hp.host = std::string(text.substr(1, close - 1));
    if (close + 1 >= text.size() || text[close + 1] != ':') {
      throw bad("missing ':port' after ']'");
    }
    port_text = text.substr(close + 2);
  } else {
    const auto colon = text.rfind(':');
    if (colon == std::string_view::npos) {
      throw bad("missing ':port'");
    }
    if (text.find(':') != colon) {
      throw bad("an IPv6 address needs brackets");
    }
    hp.host = std::string(text.substr(0, colon));
    port_text = text.substr(colon + 1);
  }
  if (hp.host.empty()) {
    throw bad("empty host");
  }
  if (port_text.empty() || port_text.size() > 5 ||
      !std::all_of(port_text.begin(), port_text.end(),
                   [](char c) { return c >= '0' && c <= '9'; })) {
    throw bad("the port is not a number");
  }
  const unsigned long port = std::stoul(std::string(port_text));
  if (port > 65535) {
    throw bad("the port is above 65535");
  }
  hp.port = static_cast<std::uint16_t>(port);
  return hp;
}

std::string format_host_port(std::string_view host, std::uint16_t port) {
  if (host.find(':') != std::string_view::npos) {
    return fmt::format("[{}]:{}", host, port);
  }
  return fmt::format("{}:{}", host, port);
}

namespace {

// Result of one getaddrinfo call, shared between the caller and the resolver thread so that a
// caller who gives up at its deadline does not leave the thread writing into freed memory.
struct Lookup {
  std::mutex mu;
  std::condition_variable cv;
  bool done = false;                 // guarded by mu
  int rc = 0;                        // guarded by mu
  std::vector<SocketAddress> addrs;  // guarded by mu
};

void run_lookup(const std::shared_ptr<Lookup>& lookup, const std::string& host, std::uint16_t port,
                int family) {
  addrinfo hints{};
  hints.ai_family = family;
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = AI_NUMERICSERV | AI_ADDRCONFIG;
  addrinfo* res = nullptr;
  const std::string service = std::to_string(port);
  const int rc = getaddrinfo(host.c_str(), service.c_str(), &hints, &res);
  std::vector<SocketAddress> addrs;
  if (rc == 0) {
    for (addrinfo* ai = res; ai != nullptr; ai = ai->ai_next) {
      SocketAddress a = SocketAddress::from_sockaddr(ai->ai_addr, ai->ai_addrlen);
      if (!a.empty() && std::find(addrs.begin(), addrs.end(), a) == addrs.end()) {
        addrs.push_back(a);
      }
    }
    freeaddrinfo(res);
  }
  std::lock_guard<std::mutex> lock(lookup->mu);
  lookup->rc = rc;
  lookup->addrs = std::move(addrs);
  lookup->done = true;
  lookup->cv.notify_all();
}

}  // namespace

std::vector<SocketAddress> resolve(const std::string& host, std::uint16_t port, Deadline deadline,
                                   int family) {
  if (auto literal = SocketAddress::parse_numeric(host, port)) {
    if (family != AF_UNSPEC && literal->family() != family) {
      throw NetworkError(fmt::format("address {} is not of the requested address family",
                                     format_host_port(host, port)));
    }
    return {*literal};
  }
  const auto start = Clock::now();
  auto lookup = std::make_shared<Lookup>();
  std::thread([lookup, host, port, family] { run_lookup(lookup, host, port, family); }).detach();
  std::unique_lock<std::mutex> lock(lookup->mu);
  if (!lookup->cv.wait_until(lock, deadline.when(), [&] { return lookup->done; })) {
    ErrorContext ctx;
    ctx.op = "resolve";
    ctx.peer_address = format_host_port(host, port);
    ctx.elapsed = std::chrono::duration_cast<Duration>(Clock::now() - start);
    throw TimeoutError(
        fmt::format("resolving host name '{}' did not finish within {}; check DNS or use a "
                    "numeric address",
                    host, format_duration(ctx.elapsed)),
        ctx);
  }
  if (lookup->rc != 0 || lookup->addrs.empty()) {
    ErrorContext ctx;
    ctx.op = "resolve";
    ctx.peer_address = format_host_port(host, port);
    throw NetworkError(
        fmt::format("cannot resolve host name '{}': {}; check the spelling, /etc/hosts or DNS, "
                    "or use a numeric address",
                    host, lookup->rc != 0 ? gai_strerror(lookup->rc) : "no stream address"),
        ctx);
  }
  std::vector<SocketAddress> out = lookup->addrs;
  // IPv4 first: on hosts where "localhost" maps to both, servers commonly bind 0.0.0.0 only.
  std::stable_sort(out.begin(), out.end(), [](const SocketAddress& a, const SocketAddress& b) {
    return a.family() == AF_INET && b.family() != AF_INET;
  });
  return out;
}

}  // namespace chorus::net
