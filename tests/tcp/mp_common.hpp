// SPDX-License-Identifier: BSD-3-Clause
// Helpers for the tcp multi-process tests: a store client in each child, a group on
// loopback, and elapsed-time measurement for upper-bound assertions.
#pragma once

#include <algorithm>
#include <chrono>
#include <memory>
#include <string>
#include <vector>

#include <chorus/errors.hpp>
#include <chorus/process_group.hpp>
#include <chorus/tcp_store.hpp>

#include "support/multiproc.hpp"

namespace chorus::test {

using namespace std::chrono_literals;

inline std::shared_ptr<Store> child_store(std::uint16_t port, Duration timeout = 30s) {
  TcpStoreOptions o;
  o.host = "127.0.0.1";
  o.port = port;
  o.timeout = timeout;
  return std::make_shared<TcpStore>(o);
}

// Loopback only (tests never send traffic elsewhere).
inline TcpGroupOptions loopback_options(Duration timeout = 30s, std::string iface = "127.0.0.1") {
  TcpGroupOptions o;
  o.interface = std::move(iface);
  o.group.timeout = timeout;
  return o;
}

// Every one of ranks [0, n) has reached `point` (through the store, not the group): before a
// rank kills itself, so that no peer is still finishing the op before it (a peer whose link
// closes fails its op at once, even when the op's data had already arrived).
inline void store_barrier(Store& store, const std::string& point, int rank, int n) {
  store.set(point + "/" + std::to_string(rank), std::string_view("1"));
  std::vector<std::string> keys;
  for (int r = 0; r < n; ++r) {
    keys.push_back(point + "/" + std::to_string(r));
  }
  store.wait(keys, std::chrono::seconds(30));
}

inline double seconds_since(Clock::time_point t) {
  return std::chrono::duration<double>(Clock::now() - t).count();
}

// Runs fn and returns the chorus::Error it threw (CHILD_CHECK fails if it threw nothing or
// something else).
template <class F>
Error expect_error(F&& fn) {
  try {
    fn();
  } catch (const Error& e) {
    return e;
  }
  throw ChildCheckFailed{"expected a chorus::Error, but the call succeeded"};
}

inline bool contains(const std::string& s, const std::string& part) {
  return s.find(part) != std::string::npos;
}

// The error names `rank` as a culprit: in its context's peers and in the text, as "rank R
// (127.0.0.1:port)" (every mp test runs on loopback).
inline bool names(const Error& e, int rank) {
  const auto& p = e.context().peers;
  return std::find(p.begin(), p.end(), rank) != p.end() &&
         contains(e.what(), "rank " + std::to_string(rank) + " (127.0.0.1:");
}

}  // namespace chorus::test
