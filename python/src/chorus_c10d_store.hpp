// SPDX-License-Identifier: BSD-3-Clause
// A chorus Store as torch's c10d::Store: the other way round from torch_store.hpp. The elastic
// helper (chorus.torch.ElasticGroup) builds torch's default group on chorus's world store, the
// one chorusrun hosts: it outlives every rank, where torch's own TCPStore lives in rank 0 and
// dies with it, so torch's group can be made again on the survivors.
#pragma once

#include <memory>

#include <chorus/store.hpp>
#include <torch/csrc/distributed/c10d/Store.hpp>

namespace chorus::torch_bridge {

c10::intrusive_ptr<c10d::Store> make_c10d_store(std::shared_ptr<Store> store, Duration timeout);

}  // namespace chorus::torch_bridge
