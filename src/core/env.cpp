// SPDX-License-Identifier: BSD-3-Clause
// Environment variables: the only getenv in chorus, plus parsing and validation of CHORUS_*.
#include "core/env.hpp"

#include <algorithm>
#include <charconv>
#include <cstdlib>
#include <string_view>
#include <system_error>

#include <fmt/format.h>

#include <chorus/errors.hpp>
#include <chorus/options.hpp>

namespace chorus::env {

std::optional<std::string> get(const char* name) {
  const char* value = std::getenv(name);
  if (value == nullptr || *value == '\0') {
    return std::nullopt;
  }
  return std::string(value);
}

std::optional<long long> parse_integer(std::string_view text) {
  // from_chars takes no leading spaces, no '+' and no "0x"; the whole text must be consumed.
  long long value = 0;
  const char* first = text.data();
  const char* last = text.data() + text.size();
  const auto [end, ec] = std::from_chars(first, last, value, 10);
  if (text.empty() || ec != std::errc() || end != last) {
    return std::nullopt;
  }
  return value;
}

std::optional<long long> get_int(const char* name, long long min, long long max,
                                 const char* who_sets_it) {
  auto text = get(name);
  if (!text) {
    return std::nullopt;
  }
  const auto value = parse_integer(*text);
  if (!value || *value < min || *value > max) {
    throw InvalidArgument(fmt::format(
        "environment variable {}='{}' is not an integer in [{}, {}] (decimal digits only: no "
        "spaces, no '+', no hex); it is normally set by {}: check the launch command",
        name, *text, min, max, who_sets_it));
  }
  return value;
}

namespace {

// The length of the run of decimal digits at the start of `text`.
std::size_t leading_digits(std::string_view text) {
  std::size_t n = 0;
  while (n < text.size() && text[n] >= '0' && text[n] <= '9') {
    ++n;
  }
  return n;
}

}  // namespace

std::optional<Duration> parse_duration(std::string_view text) {
  // Digits, an optional fraction, an optional unit; nothing else (no spaces, signs, exponents,
  // hex, inf or nan): a value that strtod would half-read is a typo, not a duration.
  const std::size_t whole = leading_digits(text);
  std::size_t number_end = whole;
  if (whole > 0 && number_end < text.size() && text[number_end] == '.') {
    const std::size_t fraction = leading_digits(text.substr(number_end + 1));
    if (fraction == 0) {
      return std::nullopt;
    }
    number_end += 1 + fraction;
  }
  double number = 0;
  const auto [end, ec] =
      std::from_chars(text.data(), text.data() + number_end, number, std::chars_format::fixed);
  if (whole == 0 || ec != std::errc() || end != text.data() + number_end || number > 1e9) {
    return std::nullopt;
  }
  const std::string_view suffix = text.substr(number_end);
  double ms = 0;
  if (suffix.empty() || suffix == "s") {
    ms = number * 1000;
  } else if (suffix == "ms") {
    ms = number;
  } else if (suffix == "m" || suffix == "min") {
    ms = number * 60'000;
  } else if (suffix == "h") {
    ms = number * 3'600'000;
  } else {
    return std::nullopt;
  }
  return Duration(static_cast<Duration::rep>(ms));
}

std::optional<Duration> default_timeout() {
  auto text = get("CHORUS_TIMEOUT");
  if (!text) {
    return std::nullopt;
  }
  auto d = parse_duration(*text);
  if (!d || *d <= Duration::zero()) {
    throw InvalidArgument(fmt::format(
        "CHORUS_TIMEOUT='{}' is not a positive duration; use seconds (\"600\") or a number with "
        "a unit: 500ms, 30s, 10m, 1h",
        *text));
  }
  return d;
}

Duration resolve_default_timeout() {
  auto d = default_timeout();
  return d ? *d : kDefaultTimeout;
}

std::optional<Duration> peer_timeout() {
  auto text = get("CHORUS_PEER_TIMEOUT");
  if (!text) {
    return std::nullopt;
  }
  if (*text == "off" || *text == "OFF") {
    return Duration::zero();
  }
  auto d = parse_duration(*text);
  if (!d) {
    throw InvalidArgument(fmt::format(
        "CHORUS_PEER_TIMEOUT='{}' is not a duration; use seconds (\"10\"), a number with a unit "
        "(500ms, 30s, 10m, 1h), or 0 / off to turn peer liveness checks off",
        *text));
  }
  return d;
}

Duration resolve_peer_timeout(std::optional<Duration> given) {
  if (given) {
    return std::max(*given, Duration::zero());
  }
  auto d = peer_timeout();
  return d ? *d : kDefaultPeerTimeout;
}

LogLevel debug_level() {
  auto text = get("CHORUS_DEBUG");
  if (!text) {
    return LogLevel::warn;
  }
  std::string upper;
  for (char c : *text) {
    upper += static_cast<char>(c >= 'a' && c <= 'z' ? c - 'a' + 'A' : c);
  }
  if (upper == "NONE" || upper == "OFF") {
    return LogLevel::none;
  }
  if (upper == "WARN") {
    return LogLevel::warn;
  }
  if (upper == "INFO") {
    return LogLevel::info;
  }
  if (upper == "TRACE") {
    return LogLevel::trace;
  }
  throw InvalidArgument(fmt::format(
      "CHORUS_DEBUG='{}' is not one of NONE, WARN, INFO, TRACE; unset it or pick one", *text));
}

std::optional<std::string> socket_ifname() { return get("CHORUS_SOCKET_IFNAME"); }

std::optional<std::string> host_id() {
  auto text = get("CHORUS_HOST_ID");
  if (!text) {
    return std::nullopt;
  }
  const bool printable =
      std::all_of(text->begin(), text->end(), [](char c) { return c > ' ' && c < 127; });
  if (!printable || text->size() > 128) {
    throw InvalidArgument(fmt::format(
        "CHORUS_HOST_ID='{}' is not a host id: use up to 128 printable characters without spaces "
        "(ranks with equal ids share memory), or unset it to use the boot id and hostname",
        *text));
  }
  return text;
}

TransportChoice transport_choice() {
  auto text = get("CHORUS_TRANSPORT");
  if (!text || *text == "auto") {
    return TransportChoice::automatic;
  }
  if (*text == "tcp") {
    return TransportChoice::tcp;
  }
  if (*text == "shm") {
    return TransportChoice::shm;
  }
  throw InvalidArgument(fmt::format(
      "CHORUS_TRANSPORT='{}' is not one of auto, tcp, shm; unset it for auto (shared memory "
      "between ranks on one host, sockets between hosts)",
      *text));
}

std::optional<long long> max_peer_sockets() {
  return get_int("CHORUS_MAX_PEER_SOCKETS", 2, 1LL << 24,
                 "the job's environment (a bound on each rank's sockets to its peers)");
}

std::optional<DataType> wire_dtype() {
  auto text = get("CHORUS_WIRE_DTYPE");
  if (!text || *text == "off") {
    return std::nullopt;
  }
  if (*text == "bf16" || *text == "bfloat16") {
    return DataType::bfloat16;
  }
  if (*text == "fp16" || *text == "float16") {
    return DataType::float16;
  }
  if (*text == "fp32" || *text == "float32") {
    return DataType::float32;
  }
  throw InvalidArgument(fmt::format(
      "CHORUS_WIRE_DTYPE='{}' is not one of bf16, fp16, fp32, off: bf16 or fp16 send float32 "
      "reductions between hosts in 16 bits, fp32 float64 ones in 32 bits; unset it (or off) "
      "for full precision",
      *text));
}

}  // namespace chorus::env

namespace chorus {

const char* environment_help() noexcept {
  return "CHORUS_TIMEOUT        default deadline of store calls, connects and collectives\n"
         "                      (seconds, or 500ms / 30s / 10m / 1h; default 10m)\n"
         "CHORUS_PEER_TIMEOUT   a tcp group declares a peer dead after this long without data or\n"
         "                      heartbeat from it (default 10s; 0 or off: no liveness checks);\n"
         "                      raise it to stop ranks in a debugger\n"
         "CHORUS_DEBUG          log level: NONE, WARN (default), INFO, TRACE\n"
         "CHORUS_SOCKET_IFNAME  interface name (eth0) or local address used for data sockets\n"
         "CHORUS_STORE_ADDR     host:port of an already running store (init_from_env); rank 0\n"
         "                      hosts one at MASTER_ADDR:MASTER_PORT otherwise\n"
         "CHORUS_STORE_TOKEN    the job's store token (16+ bytes): servers require it, clients\n"
         "                      prove it (challenge-response); chorusrun makes one per launch\n"
         "CHORUS_RUN_ID         names the job inside the store (init_from_env), so jobs sharing\n"
         "                      one chorus-store never see each other's keys; default: the\n"
         "                      launcher's job id, else \"default\"\n"
         "CHORUS_FAULT          rehearse failures (tcp backend, off by default): FAULT[;FAULT...],\n"
         "                      rank=R:close_link=P[,after_bytes=N[K|M|G]] | rank=R:stall=T[,at_seq=S]\n"
         "                      | rank=R:exit_at_seq=S\n"
         "CHORUS_TRACE_BUFFER   flight recorder entries kept per group (default 2048; 0 = off)\n"
         "CHORUS_TRACE_DIR      where ranks dump their flight recorder on a failure or SIGUSR1\n"
         "                      (default $TMPDIR/chorus-trace-<uid>-<run id>); read with chorus-trace\n"
         "MASTER_ADDR, MASTER_PORT, RANK, WORLD_SIZE, LOCAL_RANK, LOCAL_WORLD_SIZE\n"
         "                      torchrun / chorusrun launch variables (init_from_env)\n"
         "OMPI_COMM_WORLD_RANK, OMPI_COMM_WORLD_SIZE, OMPI_COMM_WORLD_LOCAL_RANK,\n"
         "OMPI_COMM_WORLD_LOCAL_SIZE   Open MPI mpirun (init_from_env)\n"
         "PMI_RANK, PMI_SIZE    MPICH / Hydra (init_from_env)\n"
         "SLURM_PROCID, SLURM_NTASKS, SLURM_LOCALID   Slurm srun (init_from_env)\n"
         "CHORUS_LAUNCHER, CHORUS_RESTART_COUNT, GROUP_RANK   set by chorusrun for each rank;\n"
         "                      TORCHELASTIC_RESTART_COUNT, TORCHELASTIC_RUN_ID and\n"
         "                      TORCHELASTIC_USE_AGENT_STORE are read the same way under torchrun\n"
         "                      (its agent store holds MASTER_PORT: chorus uses MASTER_PORT+1)\n"
         "MPI_LOCALRANKID, MPI_LOCALNRANKS, PMI_KVSNAME   MPICH / Hydra extras (init_from_env)\n"
         "SLURM_NODEID, SLURM_STEP_NUM_NODES, SLURM_STEP_TASKS_PER_NODE, SLURM_STEP_NODELIST,\n"
         "SLURM_JOB_ID, SLURM_STEP_ID   Slurm extras: local size, rendezvous host and port\n"
         "OMPI_MCA_ess_base_jobid       Open MPI job id: the store port when MASTER_PORT is unset\n";
}

}  // namespace chorus
