// SPDX-License-Identifier: BSD-3-Clause
// SocketTransport, collective streams: gathered writes and scattered reads over the posted
// messages of each data socket (one syscall moves many small messages, e.g. a signature
// header and its payload), striping of large messages over the peer's sockets, and interest
// in EPOLLIN/EPOLLOUT only while there is something to receive/send (reading interest outlives
// a receive until data comes with none posted twice: Stream::early_data).
#include <sys/epoll.h>
#include <sys/uio.h>

#include <algorithm>
#include <utility>

#include "cpu/transports/socket/socket_transport.hpp"

namespace chorus::cpu {
namespace {
// One iovec per queued part (up to kMaxIov), the first starting `off` bytes in.
template <class Queue>
int fill_iov(const Queue& q, std::size_t off, iovec* iov) {
  int cnt = 0;
  for (auto it = q.begin(); it != q.end() && cnt < SocketTransport::kMaxIov; ++it, ++cnt) {
    const std::size_t skip = cnt == 0 ? off : 0;
    iov[cnt] = {it->data + skip, it->len - skip};
  }
  return cnt;
}
}  // namespace

void SocketTransport::post_send(int peer, const void* data, std::size_t bytes,
                                std::uint64_t token) {
  post(peer, static_cast<std::byte*>(const_cast<void*>(data)), bytes, token, true);
}

void SocketTransport::post_recv(int peer, void* data, std::size_t bytes, std::uint64_t token) {
  post(peer, static_cast<std::byte*>(data), bytes, token, false);
}

void SocketTransport::post(int peer, std::byte* base, std::size_t bytes, std::uint64_t token,
                           bool send) {
  if (defer_if_closing(peer, [=, this] { post(peer, base, bytes, token, send); })) {
    return;
  }
  Peer& p = peers_[static_cast<std::size_t>(peer)];
  const std::uint64_t index = send ? p.sends++ : p.recvs++;
  if (p.failed) {
    return;  // the engine already heard about it and fails the op
  }
  ensure_link(peer);
  p.last_used = ++uses_;
  const std::size_t k = p.data.size();
  auto queue = [send](Stream& s) -> std::deque<Part>& { return send ? s.sendq : s.recvq; };
  // An idle queue starts moving at the next poll(), with the rest of this iteration's posts.
  auto pump = [this, send, peer](Stream& s) {
    bool& flag = send ? s.send_posted : s.recv_posted;
    if (!flag) {
      flag = true;
      posted_to_.push_back(peer);
    }
  };
  if (k > 1 && bytes >= k * kStripeBytes) {
    const std::size_t per = (bytes + k - 1) / k;
    const std::uint32_t req = new_req(token, static_cast<std::uint32_t>(k));
    for (std::size_t i = 0; i < k; ++i) {
      const std::size_t off = i * per;
      Stream& s = *p.data[i];
      s.early_data = s.early_data && send;
      const bool idle = queue(s).empty();
      queue(s).push_back({base + off, std::min(per, bytes - off), req});
      if (idle && !s.dead) {
        pump(s);
      }
    }
    return;
  }
  Stream& s = *p.data[index % k];
  s.early_data = s.early_data && send;
  const bool idle = queue(s).empty();
  queue(s).push_back({base, bytes, new_req(token, 1)});
  if (s.dead) {
    stream_failed(s, "connection already closed", 0);
  } else if (idle) {
    pump(s);
  }
}

void SocketTransport::move_posted() {
  // Two vectors trade places so that neither is allocated again per op.
  std::vector<int> peers;
  peers.swap(moving_);
  peers.swap(posted_to_);
  for (int peer : peers) {
    // A stream that failed meanwhile, or a link dropped since (its streams are gone), has
    // nothing left to move here.
    for (auto& s : peers_[static_cast<std::size_t>(peer)].data) {
      const bool send = std::exchange(s->send_posted, false);
      const bool recv = std::exchange(s->recv_posted, false);
      if (s->dead) {
        continue;
      }
      if (send && !write_stream(*s)) {
        continue;
      }
      if (recv) {
        read_stream(*s);
      }
    }
  }
  peers.clear();
  moving_.swap(peers);
}

void SocketTransport::update_interest(Stream& s, bool keep_reading) {
  if (s.dead || !s.registered) {
    return;
  }
  const bool reading = !s.recvq.empty() || (keep_reading && (s.interest & EPOLLIN) != 0);
  const std::uint32_t want = (reading ? static_cast<std::uint32_t>(EPOLLIN) : 0u) |
                             (s.sendq.empty() ? 0u : static_cast<std::uint32_t>(EPOLLOUT));
  if (want != s.interest) {
    loop_.modify(s.sock.fd(), want);
    s.interest = want;
  }
}

// Marks the parts that `bytes` just moved (from the front of q, `off` bytes into the first)
// done, and leaves `off` at the progress into the new front part.
void SocketTransport::consume(std::deque<Part>& q, std::size_t& off, std::size_t bytes) {
  while (bytes > 0) {
    Part& part = q.front();
    const std::size_t rest = part.len - off;
    if (bytes < rest) {
      off += bytes;
      return;
    }
    bytes -= rest;
    off = 0;
    const std::uint32_t req = part.req;
    q.pop_front();
    part_done(req);
  }
}

bool SocketTransport::write_stream(Stream& s) { return move_stream(s, true); }

bool SocketTransport::read_stream(Stream& s) { return move_stream(s, false); }

// Moves the socket's posted messages (sends or receives) until it would block or kIoBudget
// bytes moved. False if the stream failed.
bool SocketTransport::move_stream(Stream& s, bool send) {
  if (!s.registered) {
    return true;  // no link yet: the queue moves once it is made
  }
  std::deque<Part>& q = send ? s.sendq : s.recvq;
  std::size_t& off = send ? s.send_off : s.recv_off;
  std::size_t moved = 0;
  while (!q.empty() && moved < kIoBudget) {
    iovec iov[kMaxIov];
    const int cnt = fill_iov(q, off, iov);
    const net::IoResult r = send ? s.sock.writev(iov, cnt) : s.sock.readv(iov, cnt);
    if (r.would_block()) {
      break;
    }
    if (!send && (r.closed() || (r.ok() && r.bytes == 0))) {
      s.eof = true;
      // A goodbye may be waiting on the control socket: read it first, so the message says
      // "left the group" rather than "died" when that is what happened.
      if (!peers_[static_cast<std::size_t>(s.peer)].goodbye) {
        read_control(s.peer);
      }
      stream_failed(s, "the connection was closed while this rank still expected data", 0);
      return false;
    }
    if (!r.ok()) {
      stream_failed(s, (send ? "send failed: " : "receive failed: ") + r.describe(), r.os_error);
      return false;
    }
    moved += r.bytes;
    consume(q, off, r.bytes);
    if (!send) {
      peers_[static_cast<std::size_t>(s.peer)].last_heard = Clock::now();
    }
  }
  update_interest(s);
  return true;
}

void SocketTransport::on_stream(Stream& s, std::uint32_t events) {
  if (s.dead || peers_[static_cast<std::size_t>(s.peer)].release == Release::agreed) {
    return;  // a link being released: its end closes, which is no failure
  }
  if ((events & EPOLLIN) && s.recvq.empty()) {
    // The peer is ahead: its data waits for the receive's post (see Stream::early_data).
    if (std::exchange(s.early_data, true)) {
      update_interest(s, false);
    }
  } else if ((events & EPOLLIN) && !read_stream(s)) {
    return;
  }
  if ((events & EPOLLOUT) && !write_stream(s)) {
    return;
  }
  if (events & (EPOLLERR | EPOLLHUP)) {
    const int err = s.sock.take_error();
    stream_failed(s, err ? "connection error: " + net::errno_name(err) : "connection hung up", err);
  }
}

void SocketTransport::stream_failed(Stream& s, const std::string& what, int os_error) {
  const bool pending = !s.sendq.empty() || !s.recvq.empty();
  if (!s.dead) {
    s.dead = true;
    if (s.registered) {
      loop_.remove(s.sock.fd());
      s.registered = false;
    }
    s.sock.close();
  }
  const Peer& p = peers_[static_cast<std::size_t>(s.peer)];
  // A data socket closing after its peer said goodbye is the normal end, unless this rank
  // still had something to exchange on it.
  if (pending || !p.goodbye) {
    peer_failed(s.peer, what, os_error);
  }
}

}  // namespace chorus::cpu
