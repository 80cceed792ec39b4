// SPDX-License-Identifier: BSD-3-Clause
// A redis-benchmark-like load generator for key-value servers: one epoll thread (or a few)
// drives N non-blocking connections; each connection sends a batch of P requests in one write
// (P = 1: one request in flight; P = 16: like redis-benchmark -P 16) and sends the next batch
// when every reply of the previous one has arrived. It speaks the chorus store protocol
// (docs/protocol.md, encoded here by hand: the bench depends on no private header) and RESP
// (redis), so that both servers are driven by the same client code.
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

namespace store_load {

enum class Proto { chorus, resp };
enum class Op { set, get, add };  // add = chorus add(counter, 1) = redis INCR counter

const char* op_name(Op op);

struct Spec {
  Proto proto = Proto::chorus;
  Op op = Op::set;
  std::uint16_t port = 0;  // 127.0.0.1
  int connections = 64;
  long ops = 200000;  // in total, split over the connections (rounded to whole batches)
  int pipeline = 1;   // requests per batch
  int threads = 1;    // generator threads; connections are split over them
  // Called right before the timed part starts and right after it ends (e.g. to read the
  // server's CPU time).
  std::function<void()> at_start;
  std::function<void()> at_end;
};

struct Result {
  bool ok = false;
  std::string error;
  long ops = 0;            // replies received in the timed part
  double seconds = 0;      // from the common start to the last reply
  double cpu_seconds = 0;  // user + system CPU of the generator threads during the timed part
};

// Connects (untimed; for get: stores each connection's key first), then runs the timed part.
Result run(const Spec& spec);

// Holds `connections` connections open (chorus: each completed the handshake); `act` makes each
// send one set and wait for its reply. For memory measurements of the server.
class IdleClients {
 public:
  IdleClients(Proto proto, std::uint16_t port, int connections);
  ~IdleClients();
  IdleClients(const IdleClients&) = delete;
  IdleClients& operator=(const IdleClients&) = delete;
  int connected() const { return static_cast<int>(fds_.size()); }
  const std::string& error() const { return error_; }
  bool act();  // every connection: one set of its own key, reply awaited

 private:
  Proto proto_;
  std::vector<int> fds_;
  std::string error_;
};

// Resident and peak resident memory of a process (/proc/PID/status VmRSS, VmHWM), in KiB.
struct Rss {
  long rss_kib = -1;
  long hwm_kib = -1;
};
Rss read_rss(pid_t pid);

}  // namespace store_load
