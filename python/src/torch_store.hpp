// SPDX-License-Identifier: BSD-3-Clause
// torch's store (the one init_process_group made, behind torch's PrefixStore) as a chorus
// Store, so a chorus group bootstraps through the rendezvous torch already did.
#pragma once

#include <memory>

#include <chorus/store.hpp>
#include <torch/csrc/distributed/c10d/Store.hpp>

namespace chorus::torch_bridge {

// Waiting calls look for the keys (check()) on a TCPStore, at a pace that grows with the time
// waited and, at most, with `group_size` (torch 2.x's TCPStore client logs a warning for each
// of its own waits that runs out); on other stores they map to torch's wait(keys, timeout).
// torch's errors become chorus's: a wait that ran out becomes TimeoutError naming the missing
// keys, anything else StoreError with torch's text. server_host() is the host of the TCPStore
// under any PrefixStores, so the tcp backend binds the address that routes to it (as for
// chorus's own TcpStore).
std::shared_ptr<Store> make_torch_store(c10::intrusive_ptr<c10d::Store> store,
                                        Duration default_timeout, int group_size);

}  // namespace chorus::torch_bridge
