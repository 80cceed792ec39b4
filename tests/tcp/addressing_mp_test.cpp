// SPDX-License-Identifier: BSD-3-Clause
// Without CHORUS_SOCKET_IFNAME, a tcp group binds the local address that routes to the store's
// host, also when the store is wrapped in a PrefixStore (as init_from_env does): a store on
// 127.0.0.1 keeps the group's data traffic on loopback.
#include <catch2/catch.hpp>

#include <cstdlib>
#include <sstream>
#include <string>

#include <chorus/process_group.hpp>
#include <chorus/tcp_store.hpp>

#include "support/multiproc.hpp"

using namespace chorus;
using namespace std::chrono_literals;

TEST_CASE("a group over PrefixStore(TcpStore on 127.0.0.1) publishes loopback addresses",
          "[tcp][mp][addressing]") {
  unsetenv("CHORUS_SOCKET_IFNAME");
  test::StoreServerProcess server;
  const auto port = server.port();
  auto results = test::run_processes(
      2,
      [port](int rank) {
        auto tcp = std::make_shared<TcpStore>(
            TcpStoreOptions{.host = "127.0.0.1", .port = port, .timeout = 20s});
        auto store = make_prefix_store("run/addressing", tcp);
        auto pg = make_tcp_group(store, rank, 2, {.group = {.timeout = 20s}});
        std::vector<float> x(4, 1.0f);
        pg->allreduce(Tensor::of(x.data(), x.size()))->wait();
        CHILD_CHECK(x[0] == 2.0f);
        int published = 0;
        for (const auto& key : tcp->list_keys()) {
          if (key.rfind("run/addressing/", 0) == 0 && key.find("/claim/") != std::string::npos) {
            // "<world size> <pid>@<host> <host:port> <host id>": the address is the third field.
            std::istringstream claim(tcp->get_string(key));
            std::string size, who, address;
            claim >> size >> who >> address;
            if (address.rfind("127.", 0) != 0) {
              throw test::ChildCheckFailed{"key " + key + " holds non-loopback address " + address};
            }
            ++published;
          }
        }
        CHILD_CHECK(published == 2);
        pg->barrier()->wait();
      },
      60s);
  REQUIRE_ALL_OK(results);
}
