// SPDX-License-Identifier: BSD-3-Clause
// chorus-store: run a TcpStore server alone (--host/--port), or look into a live rendezvous as
// a client, like redis-cli (--connect H:P get|set|add|wait|check|keys|ping|delete|num_keys).
#include <pthread.h>
#include <signal.h>

#include <chrono>
#include <climits>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <iostream>
#include <optional>
#include <string>
#include <vector>

#include <chorus/errors.hpp>
#include <chorus/tcp_store.hpp>

#include "cli_number.hpp"
#include "token_file.hpp"

namespace {

constexpr const char* kUsage =
    "usage:\n"
    "  chorus-store [--host H] [--port P]                 serve (port 0 picks a free port)\n"
    "  chorus-store --connect H:P [--timeout S] COMMAND   talk to a running store\n"
    "\n"
    "Serving prints \"chorus-store listening on HOST:PORT\" as its first line on stdout and runs\n"
    "until SIGINT or SIGTERM. Defaults: --host 0.0.0.0 --port 29500 (\"::\" for dual-stack).\n"
    "\n"
    "commands:\n"
    "  get KEY            print the value (waits until the key exists or the timeout passes)\n"
    "  set KEY VALUE      store VALUE under KEY\n"
    "  add KEY N          add N to the counter at KEY and print the new value\n"
    "  wait KEY...        wait until every KEY exists\n"
    "  check KEY...       print true if every KEY exists now, else false (exit 1)\n"
    "  delete KEY         remove KEY; prints true if it existed\n"
    "  keys               list every key, one per line\n"
    "  num_keys           print the number of keys\n"
    "  ping               print the round-trip time\n"
    "\n"
    "options:\n"
    "  --timeout SECONDS  deadline of the connect and of the command (default 10; decimals ok)\n"
    "  --token-file F     the job token (first line of F; 16+ bytes): serving, every client must\n"
    "                     prove it knows it; as a client, authenticate with it. Default:\n"
    "                     CHORUS_STORE_TOKEN. Without one the store serves anyone who connects\n"
    "\n"
    "server limits (plain integers of bytes or seconds; see docs/protocol.md, Limits):\n"
    "  --max-value-bytes N         largest value accepted (default 8388608 = 8 MiB)\n"
    "  --max-unread-reply-bytes N  unread replies per connection before its requests wait\n"
    "                              (default 67108864 = 64 MiB)\n"
    "  --max-reply-bytes N         largest single reply (multi_get, keys; default 64 MiB)\n"
    "  --max-buffered-bytes N      input and unsent replies of all connections (default 1 GiB)\n"
    "  --max-stored-bytes N        keys and values held (+64 per key); writes past it are\n"
    "                              refused (default 1 GiB)\n"
    "  --max-connections N         0 = the open file limit minus 64 (default 0)\n"
    "  --hello-timeout S           close connections without a handshake after S (default 5)\n"
    "  --stall-timeout S           close a partial frame or unread replies idle for S (default 30)\n"
    "  -h, --help         this text\n"
    "\n"
    "Exit status: 0 on success; 1 when check finds a key missing; 2 for usage errors;\n"
    "3 on timeout; 4 on any other error (the message is printed on stderr).\n";

chorus::Duration chrono_ms(double seconds) {
  return chorus::Duration(static_cast<long long>(seconds * 1000.0));
}

// Seconds as a plain decimal ("10", "0.5"): no inf, nan, exponent or hex, and at most ~11 days,
// so that the millisecond conversion cannot overflow.
constexpr double kMaxSeconds = 1e6;
std::optional<double> parse_seconds(const std::string& text) {
  if (text.empty() || text.find_first_not_of("0123456789.") != std::string::npos) {
    return std::nullopt;
  }
  char* end = nullptr;
  const double v = std::strtod(text.c_str(), &end);
  if (end == text.c_str() || *end != '\0' || !std::isfinite(v) || !(v > 0) || v > kMaxSeconds) {
    return std::nullopt;
  }
  return v;
}

int usage_error(const std::string& what) {
  std::cerr << "chorus-store: " << what << "\n\n" << kUsage;
  return 2;
}

std::optional<std::uint16_t> parse_port(const std::string& text) {
  char* end = nullptr;
  const long v = std::strtol(text.c_str(), &end, 10);
  if (end == text.c_str() || *end != '\0' || v < 0 || v > 65535) {
    return std::nullopt;
  }
  return static_cast<std::uint16_t>(v);
}

// Splits "host:port" or "[v6]:port".
bool split_host_port(const std::string& text, std::string& host, std::uint16_t& port) {
  std::string port_text;
  if (!text.empty() && text[0] == '[') {
    const auto close = text.find("]:");
    if (close == std::string::npos) {
      return false;
    }
    host = text.substr(1, close - 1);
    port_text = text.substr(close + 2);
  } else {
    const auto colon = text.rfind(':');
    if (colon == std::string::npos || colon == 0) {
      return false;
    }
    host = text.substr(0, colon);
    port_text = text.substr(colon + 1);
  }
  const auto p = parse_port(port_text);
  if (!p) {
    return false;
  }
  port = *p;
  return true;
}

int serve(chorus::TcpStoreServerOptions options) {
  // Block the stop signals before the server thread starts so that only sigwait sees them.
  sigset_t stop;
  sigemptyset(&stop);
  sigaddset(&stop, SIGINT);
  sigaddset(&stop, SIGTERM);
  pthread_sigmask(SIG_BLOCK, &stop, nullptr);
  const std::string& host = options.host;
  chorus::TcpStoreServer server(options);
  const bool v6 = host.find(':') != std::string::npos;
  std::printf("chorus-store listening on %s%s%s:%u\n", v6 ? "[" : "", host.c_str(), v6 ? "]" : "",
              static_cast<unsigned>(server.port()));
  std::fflush(stdout);
  int sig = 0;
  sigwait(&stop, &sig);
  std::fprintf(stderr, "chorus-store: stopping (signal %d) with %zu clients connected\n", sig,
               server.num_clients());
  return 0;
}

int client(const std::string& address, double timeout_s, const std::vector<std::string>& args,
           const std::optional<std::string>& token) {
  std::string host;
  std::uint16_t port = 0;
  if (!split_host_port(address, host, port)) {
    return usage_error("--connect needs HOST:PORT or [V6]:PORT, got '" + address + "'");
  }
  if (args.empty()) {
    return usage_error("missing command after --connect");
  }
  const std::string& cmd = args[0];
  const auto need = [&](std::size_t n, bool at_least) {
    return at_least ? args.size() >= n + 1 : args.size() == n + 1;
  };
  const auto timeout = chrono_ms(timeout_s);
  chorus::TcpStoreOptions options;
  options.host = host;
  options.port = port;
  options.timeout = timeout;
  options.counts_as_client = false;
  options.token = token;  // unset: CHORUS_STORE_TOKEN
  if (cmd == "get" && need(1, false)) {
    chorus::TcpStore store(options);
    const auto value = store.get(args[1]);
    std::fwrite(value.data(), 1, value.size(), stdout);
    std::fputc('\n', stdout);
  } else if (cmd == "set" && need(2, false)) {
    chorus::TcpStore store(options);
    store.set(args[1], std::string_view(args[2]));
  } else if (cmd == "add" && need(2, false)) {
    const auto delta = chorus::cli::parse_int_in(args[2], LLONG_MIN, LLONG_MAX);
    if (!delta) {
      return usage_error("add " + chorus::cli::int_expected("N", args[2], LLONG_MIN, LLONG_MAX));
    }
    chorus::TcpStore store(options);
    std::printf("%lld\n", static_cast<long long>(store.add(args[1], *delta)));
  } else if (cmd == "wait" && need(1, true)) {
    chorus::TcpStore store(options);
    store.wait(std::vector<std::string>(args.begin() + 1, args.end()));
  } else if (cmd == "check" && need(1, true)) {
    chorus::TcpStore store(options);
    const bool present = store.check(std::vector<std::string>(args.begin() + 1, args.end()));
    std::puts(present ? "true" : "false");
    return present ? 0 : 1;
  } else if (cmd == "delete" && need(1, false)) {
    chorus::TcpStore store(options);
    std::puts(store.delete_key(args[1]) ? "true" : "false");
  } else if (cmd == "keys" && need(0, false)) {
    chorus::TcpStore store(options);
    for (const auto& k : store.list_keys()) {
      std::puts(k.c_str());
    }
  } else if (cmd == "num_keys" && need(0, false)) {
    chorus::TcpStore store(options);
    std::printf("%lld\n", static_cast<long long>(store.num_keys()));
  } else if (cmd == "ping" && need(0, false)) {
    chorus::TcpStore store(options);
    const auto start = std::chrono::steady_clock::now();
    store.ping();
    const auto us = std::chrono::duration_cast<std::chrono::microseconds>(
                        std::chrono::steady_clock::now() - start)
                        .count();
    std::printf("pong from %s in %lld us\n", address.c_str(), static_cast<long long>(us));
  } else {
    return usage_error("unknown command or wrong number of arguments: '" + cmd + "'");
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) try {
  chorus::TcpStoreServerOptions server;
  std::string connect;
  double timeout_s = 10;
  std::optional<std::string> token;
  std::vector<std::string> rest;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    const auto value = [&]() -> std::optional<std::string> {
      if (i + 1 >= argc) {
        return std::nullopt;
      }
      return std::string(argv[++i]);
    };
    if (!rest.empty()) {
      rest.push_back(a);  // everything after the command is its arguments
    } else if (a == "-h" || a == "--help") {
      std::fputs(kUsage, stdout);
      return 0;
    } else if (a == "--host") {
      auto v = value();
      if (!v) return usage_error("--host needs a value");
      server.host = *v;
    } else if (a == "--port") {
      auto v = value();
      auto p = v ? parse_port(*v) : std::nullopt;
      if (!p) return usage_error("--port needs a number in 0..65535");
      server.port = *p;
    } else if (a == "--token-file") {
      const auto v = value();
      if (!v) return usage_error("--token-file needs a file name");
      token = chorus::cli::read_token_file(*v);
      if (!token) return usage_error("--token-file: cannot read '" + *v + "'");
    } else if (a == "--connect") {
      auto v = value();
      if (!v) return usage_error("--connect needs HOST:PORT");
      connect = *v;
    } else if (a == "--timeout") {
      auto v = value();
      auto t = v ? parse_seconds(*v) : std::nullopt;
      if (!t) {
        return usage_error(
            "--timeout expects seconds as a plain decimal number in (0, 1000000], got '" +
            v.value_or("") + "'");
      }
      timeout_s = *t;
    } else if (a == "--hello-timeout" || a == "--stall-timeout") {
      auto v = value();
      auto t = v ? parse_seconds(*v) : std::nullopt;
      if (!t) {
        return usage_error(a + " expects seconds as a plain decimal number in (0, 1000000], got '" +
                           v.value_or("") + "'");
      }
      (a == "--hello-timeout" ? server.hello_timeout : server.stall_timeout) = chrono_ms(*t);
    } else if (a == "--max-value-bytes" || a == "--max-unread-reply-bytes" ||
               a == "--max-reply-bytes" || a == "--max-buffered-bytes" ||
               a == "--max-stored-bytes" || a == "--max-connections") {
      // Plain integers only: "5G", "-1" and "abc" are refused, never misread.
      const bool conns = a == "--max-connections";
      const long long lo = conns ? 0 : 1;
      // Values must leave room in a 4 GiB frame; budgets fit any 64-bit machine.
      const long long hi = a == "--max-value-bytes" ? (1LL << 30)
                           : conns                  ? (1LL << 24)
                                                    : (1LL << 40);
      auto v = value();
      auto n = v ? chorus::cli::parse_int_in(*v, lo, hi) : std::nullopt;
      if (!n) {
        return usage_error(chorus::cli::int_expected(a, v.value_or(""), lo, hi));
      }
      const auto bytes = static_cast<std::size_t>(*n);
      if (a == "--max-value-bytes") server.max_value_bytes = bytes;
      if (a == "--max-unread-reply-bytes") server.max_unread_reply_bytes = bytes;
      if (a == "--max-reply-bytes") server.max_reply_bytes = bytes;
      if (a == "--max-buffered-bytes") server.max_buffered_bytes = bytes;
      if (a == "--max-stored-bytes") server.max_stored_bytes = bytes;
      if (conns) server.max_connections = bytes;
    } else if (a.size() > 1 && a[0] == '-') {
      return usage_error("unknown option '" + a + "'");
    } else {
      rest.push_back(a);
    }
  }
  try {
    if (connect.empty()) {
      if (!rest.empty()) {
        return usage_error("a command needs --connect HOST:PORT");
      }
      if (token) {
        server.token = *token;
      } else if (const char* env = std::getenv("CHORUS_STORE_TOKEN"); env != nullptr && *env) {
        server.token = env;
      }
      return serve(server);
    }
    return client(connect, timeout_s, rest, token);
  } catch (const chorus::TimeoutError& e) {
    std::fprintf(stderr, "chorus-store: %s\n", e.what());
    return 3;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "chorus-store: %s\n", e.what());
    return 4;
  }
} catch (const std::exception& e) {  // outside the command itself (reading the token file)
  std::fprintf(stderr, "chorus-store: %s\n", e.what());
  return 4;
}
