// SPDX-License-Identifier: BSD-3-Clause
// SocketTransport: the EngineTransport over the group's links. It owns the event loop that the
// engine's thread runs in poll(), and the LinkConnector that makes the links setup did not:
// a transfer posted to a peer without a link is queued, the connector is asked for the link
// (link_connector.hpp), and the queue starts moving when the link arrives. A link that cannot
// be made fails that peer as a broken one would. The code is in three files: socket_transport.cpp
// (setup, poll, failures, teardown), data_streams.cpp (collective streams) and control_channel.cpp
// (framed tagged messages and control frames).
//
// Per peer pair: sockets_per_peer data sockets carry the collective streams (no framing: both
// ends post the same messages in the same order, see transport.hpp; a message of at least
// kStripeBytes per socket is cut into one part per socket, smaller ones go whole to socket
// (message index mod sockets)), and one control socket carries framed messages (wire.hpp):
// tagged send/recv and the failure notices. The control socket is always read, so a peer's
// death (EOF without a goodbye, or a reset) is seen at once even when no op involves it;
// data sockets are read only while a receive is posted (unread data stays in the kernel and
// throttles the sender, which is the flow control).
//
// Progress thread only: every method runs on the engine's thread (the EventLoop's).
#pragma once

#include "core/private.hpp"

#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include <chorus/deadline.hpp>

#include "cpu/transports/socket/mesh.hpp"
#include "cpu/transports/transport.hpp"
#include "cpu/transports/wire.hpp"
#include "net/event_loop.hpp"
#include "net/socket.hpp"

namespace chorus::cpu {

class SocketTransport final : public EngineTransport {
 public:
  static constexpr std::size_t kStripeBytes = 64 * 1024;
  static constexpr int kMaxIov = 32;
  // Bytes one readiness callback may move before returning to the loop, so that one busy
  // socket cannot starve the others (level-triggered epoll reports it again).
  static constexpr std::size_t kIoBudget = 8u << 20;
  // A peer that refused to release an idle link is asked again after this.
  static constexpr auto kReleaseRetry = std::chrono::milliseconds(20);

  // `host_ranks`: the group ranks on this rank's host; data sockets to them get
  // Mesh::local_send_buffer.
  SocketTransport(int rank, int size, Mesh mesh, const std::vector<int>& host_ranks);
  ~SocketTransport() override;

  void post_send(int peer, const void* data, std::size_t bytes, std::uint64_t token) override;
  void post_recv(int peer, void* data, std::size_t bytes, std::uint64_t token) override;
  void send_p2p(int peer, std::uint32_t tag, const void* data, std::size_t bytes,
                std::uint64_t token) override;
  void recv_p2p(int peer, std::uint32_t tag, void* data, std::size_t bytes,
                std::uint64_t token) override;
  void send_control(int peer, FrameType type, std::vector<std::uint8_t> payload) override;
  void poll(Deadline until, std::vector<std::uint64_t>& completed,
            std::vector<TransportEvent>& events) override;
  void wakeup() noexcept override { loop_.wakeup(); }
  // Only the spin: a small op's publishes do not reach the sockets.
  void before_poll(const PollHint& hint) noexcept override { spin_ = hint.spin; }
  void drop_all() noexcept override;
  void flush_control(Deadline until) override;
  void close_all() noexcept override;
  void sever(int peer) noexcept override;
  bool peer_connected(int peer) const override;
  std::optional<Clock::time_point> last_heard(int peer) const override;
  const std::string& address(int peer) const override {
    return peers_[static_cast<std::size_t>(peer)].address;
  }
  const std::string& local_address() const override { return local_address_; }

 private:
  struct Part {
    std::byte* data;
    std::size_t len;
    std::uint32_t req;
  };
  struct Stream {
    net::Socket sock;
    int peer = -1;
    std::deque<Part> sendq;
    std::size_t send_off = 0;  // bytes of sendq.front() already written
    std::deque<Part> recvq;
    std::size_t recv_off = 0;
    std::uint32_t interest = 0;
    bool registered = false;
    bool eof = false;   // orderly EOF seen
    bool dead = false;  // error, or closed by us
    // Posted to an idle queue since the last poll(): moved there, together with whatever
    // else this engine iteration posts (one syscall for a header and its payload).
    bool send_posted = false;
    bool recv_posted = false;
    // Data arrived with no receive posted (the peer is ahead) once since the last post. The
    // second time, reading interest goes until a receive is posted: once only, the next op's
    // receive usually comes first, and dropping and restoring the interest would cost two
    // epoll_ctl calls per small op.
    bool early_data = false;
  };
  struct OutFrame {
    std::array<std::uint8_t, kFrameHeaderBytes> header;
    std::vector<std::uint8_t> owned;
    const std::byte* data = nullptr;  // p2p payload (borrowed) or owned.data()
    std::size_t len = 0;
    std::size_t off = 0;      // bytes of header + payload written
    std::uint64_t token = 0;  // p2p send to complete (set on its last chunk only)
    bool tagged = false;      // a chunk of a tagged message (else a control frame)
  };
  struct P2pRecv {
    std::uint32_t tag;
    std::byte* data;
    std::size_t bytes;
    std::uint64_t token;
    std::uint64_t order;  // p2p_posts_ when posted: an earlier recv matches first
  };
  struct Unexpected {
    std::uint32_t tag;
    std::vector<std::uint8_t> bytes;
    std::uint64_t order;  // p2p_arrivals_ when it arrived: a recv from any peer takes the first
  };
  struct Control {
    net::Socket sock;
    std::uint32_t interest = 0;
    bool registered = false;
    bool dead = false;
    std::deque<OutFrame> sendq;
    std::array<std::uint8_t, kFrameHeaderBytes> header{};
    std::size_t header_got = 0;
    bool in_body = false;
    FrameHeader frame{};
    std::size_t body_got = 0;
    std::byte* body_dst = nullptr;       // where the body goes (user buffer, body_buf, or discard)
    std::size_t body_len = 0;            // body bytes of the frame being read
    std::vector<std::uint8_t> body_buf;  // body of a control frame
    // The tagged message being received (its chunks may be split by control frames).
    bool msg_open = false;
    std::uint32_t msg_tag = 0;
    std::size_t msg_left = 0;           // bytes still due in p2p_more frames
    std::byte* msg_next = nullptr;      // where they go (nullptr: discarded)
    std::uint64_t msg_token = 0;        // matched p2p recv (0: unexpected, or dropped)
    bool msg_dropped = false;           // the group failed meanwhile: the rest is discarded
    std::string msg_error;              // matched recv failed (size mismatch): discard the body
    std::vector<std::uint8_t> msg_buf;  // an unexpected message, until its recv is posted
    std::deque<P2pRecv> posted;
    std::deque<Unexpected> unexpected;
  };
  // Closing an idle link to stay under CHORUS_MAX_PEER_SOCKETS (wire.hpp, link_release).
  enum class Release : std::uint8_t {
    none,
    asked,   // we asked the peer; posts wait for its answer
    agreed,  // closing: posts wait, and the link is dropped at the end of this poll
  };
  struct Peer {
    std::string address;
    bool link_requested = false;  // asked the connector for it (or setup made it)
    bool pinned = false;          // a setup link (ring neighbour, host peer): never released
    bool same_host = false;       // on this rank's host (one of the constructor's host_ranks)
    Release release = Release::none;
    bool release_when_flushed = false;  // our "ok" is still being written
    std::uint64_t last_used = 0;     // uses_ at its last post: the order of use, for the LRU bound
    Clock::time_point refused_at{};  // when it last refused to release the link
    std::vector<std::function<void()>> deferred;  // posts made while the link was closing
    std::vector<std::unique_ptr<Stream>> data;
    std::unique_ptr<Control> control;
    std::uint64_t sends = 0;  // messages posted, for striping
    std::uint64_t recvs = 0;
    Clock::time_point last_heard = Clock::now();  // anything read from this peer
    bool goodbye = false;
    bool failed = false;
    bool draining = false;  // peer_failed() is reading the control socket's last frames
    bool lost = false;      // its control socket ended without a goodbye: fails next poll
  };
  struct Req {
    std::uint64_t token = 0;
    std::uint32_t parts = 0;
  };

  std::uint32_t new_req(std::uint64_t token, std::uint32_t parts);
  void part_done(std::uint32_t req);
  // post_send (send) or post_recv: queues the message on its socket(s); the next poll()
  // starts moving it (move_posted()).
  void post(int peer, std::byte* base, std::size_t bytes, std::uint64_t token, bool send);
  // Moves what was posted to idle queues since the last poll().
  void move_posted();
  void consume(std::deque<Part>& q, std::size_t& off, std::size_t bytes);
  void on_stream(Stream& s, std::uint32_t events);
  void on_control(int peer, std::uint32_t events);
  bool write_stream(Stream& s);
  bool read_stream(Stream& s);
  bool move_stream(Stream& s, bool send);
  // Reports a tagged send/recv as finished (failed if `error` is not empty).
  void p2p_done(int peer, std::uint64_t token, std::string error = {});
  void write_control(int peer);
  void read_control(int peer);
  bool start_frame(int peer);
  void control_frame_complete(int peer);
  // EPOLLOUT while sends are queued. EPOLLIN while receives are posted, and, unless
  // `keep_reading` is false, after the last one finished: the next op's receive usually
  // follows within microseconds, and two epoll_ctl calls per op cost more than one
  // readiness event that finds nothing posted (on_stream() then turns EPOLLIN off).
  void update_interest(Stream& s, bool keep_reading = true);
  void update_control_interest(int peer);
  // The earliest posted recv for a message with `tag` from `peer` (its own or one from any
  // peer), removed from its queue; nullopt if none.
  std::optional<P2pRecv> take_posted(int peer, std::uint32_t tag);
  // A recv from any peer: the earliest buffered message with `tag`, delivered; false if none.
  bool recv_buffered_from_any(std::uint32_t tag, void* data, std::size_t bytes,
                              std::uint64_t token);
  // Copies a buffered message into a recv's buffer (or reports the size mismatch).
  void deliver_buffered(int peer, const std::vector<std::uint8_t>& message, std::uint32_t tag,
                        void* data, std::size_t bytes, std::uint64_t token);
  void stream_failed(Stream& s, const std::string& what, int os_error);
  void peer_failed(int peer, const std::string& what, int os_error);
  void close_peer(int peer) noexcept;
  // False once the peer failed: nothing more goes to it.
  bool usable(int peer) const;
  // Makes the peer's queues (sockets still absent).
  void make_queues(int peer);
  // make_queues, and asks the connector for the link, once.
  void ensure_link(int peer);
  // Looks at the sockets without sleeping, yielding in between, until something happens
  // (true) or spin_ (or `wait_until`) passes (false). See before_poll().
  bool spin(Deadline wait_until);
  // Takes the connector's finished links and failures (start of every poll).
  void take_links();
  void install_link(int peer, std::vector<net::Socket> sockets, const std::string& address);
  // Hands an event to the engine, holding failure news for a poll (held_events_).
  void emit(TransportEvent ev);
  // CHORUS_MAX_PEER_SOCKETS: nothing queued or expected on the link, in either direction.
  bool idle(int peer) const;
  // Asks the least recently used idle peers to release their links while over the bound.
  void enforce_link_bound();
  void on_release_frame(int peer, FrameType type, const std::vector<std::uint8_t>& payload);
  // Queues a control frame, whatever the link's state (send_control drops them on a closing one).
  void queue_frame(int peer, FrameType type, std::vector<std::uint8_t> payload);
  // Closes an agreed link and returns the pair to "no link yet"; runs the posts that waited.
  void drop_link(int peer);
  // True (and the post kept for later) if the peer's link is closing. A template, so that the
  // usual case (not closing) builds no std::function: its captures would cost a heap block
  // per posted transfer.
  template <typename Post>
  bool defer_if_closing(int peer, Post&& post) {
    Peer& p = peers_[static_cast<std::size_t>(peer)];
    if (p.release == Release::none) {
      return false;
    }
    p.deferred.emplace_back(std::forward<Post>(post));
    return true;
  }

  int rank_;
  int size_;
  int sockets_per_peer_;
  net::EventLoop loop_;
  std::unique_ptr<LinkConnector> connector_;  // declared after loop_: stops before it closes
  std::string local_address_;
  std::vector<Peer> peers_;
  std::size_t max_links_ = 0;     // 0: no bound
  int local_send_buffer_ = 0;     // SO_SNDBUF of data sockets to same-host peers (0: autotuned)
  std::size_t open_links_ = 0;    // links up that may be released (not pinned)
  std::size_t pinned_links_ = 0;  // setup links
  std::vector<int> to_drop_;      // agreed releases, done at the end of poll()
  // Tagged receives from any peer (kAnyPeer), in post order. A message takes the earliest
  // posted recv that matches it, from its peer's `posted` or from here.
  std::deque<P2pRecv> any_posted_;
  std::uint64_t p2p_posts_ = 0;
  std::uint64_t p2p_arrivals_ = 0;
  std::vector<int> posted_to_;  // peers with a Stream::send_posted/recv_posted set
  std::vector<int> moving_;     // move_posted()'s copy of posted_to_ (kept for its memory)
  std::uint64_t uses_ = 0;      // counts posts; Peer::last_used (no clock read per post)
  std::vector<int> lost_;       // peers whose control socket ended (reported next poll)
  // A peer's failure news (abort notice, goodbye) is handed over one poll later, like a
  // control socket's end: data that peer sent before it, on a data socket whose receive the
  // engine posts only once this poll's completions are in, still completes the op here.
  std::vector<TransportEvent> held_events_;
  std::set<int> news_held_for_;  // peers with held news: their later events wait behind it
  Deadline retry_release_ = Deadline::never();  // when to ask a peer that refused again
  std::chrono::microseconds spin_{0};           // PollHint::spin (before_poll())
  std::vector<Req> reqs_;
  std::vector<std::uint32_t> free_reqs_;
  std::vector<std::uint64_t> completed_;
  std::vector<TransportEvent> events_;
  std::vector<std::byte> discard_;
};

}  // namespace chorus::cpu
