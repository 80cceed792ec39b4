// SPDX-License-Identifier: BSD-3-Clause
// ServerHandshake: the server's side of one connection's handshake (docs/protocol.md §1): the
// 8-byte hello, and with a job token the challenge and both proofs (store_auth.hpp). It reads
// from the connection's input, answers into its output, and says when the client may send
// requests, or why it must be closed.
//
// Separate from the server because it is a small state machine of its own, run before any
// request, and the one place that decides who may talk to the store.
#pragma once

#include "core/private.hpp"

#include <string>

#include "net/frame.hpp"
#include "net/socket.hpp"
#include "store/store_auth.hpp"

namespace chorus::store {

class ServerHandshake {
 public:
  enum class Step {
    need_more,  // waiting for the client's next bytes (its hello, or its proof)
    done,       // the client may send requests
    refused,    // close the connection: `why` says why
  };
  // One step, with what `in` holds now: reads the hello (answering it: accepted, or a
  // challenge when `token` is set), or, after a challenge, the client's proof. A refusal tells
  // the client why first (best effort, straight on `socket`: the connection closes next).
  Step advance(net::FrameReader& in, net::Socket& socket, net::OutputQueue& out,
               const std::string& token, std::string& why);
  // The client's hello asked to count toward wait_for_clients.
  bool member() const noexcept { return member_; }

 private:
  Step read_hello(net::FrameReader& in, net::Socket& socket, net::OutputQueue& out,
                  const std::string& token, std::string& why);
  Step read_proof(net::FrameReader& in, net::Socket& socket, net::OutputQueue& out,
                  const std::string& token, std::string& why);

  bool awaiting_auth_ = false;  // challenge sent, the client's proof not read yet
  Nonce challenge_{};
  bool member_ = false;
};

}  // namespace chorus::store
