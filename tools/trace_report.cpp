// SPDX-License-Identifier: BSD-3-Clause
#include "trace_report.hpp"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <map>
#include <memory>
#include <set>
#include <sstream>
#include <stdexcept>
#include <string_view>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

namespace chorus::trace_tool {
namespace {

using nlohmann::json;

int int_or(const json& j, const char* key, int fallback) {
  const auto it = j.find(key);
  return it != j.end() && it->is_number_integer() ? it->get<int>() : fallback;
}

std::string str_or(const json& j, const char* key) {
  const auto it = j.find(key);
  return it != j.end() && it->is_string() ? it->get<std::string>() : std::string();
}

OpRecord parse_op(const json& j) {
  OpRecord o;
  o.seq = j.at("seq").get<std::uint64_t>();
  o.p2p = j.value("p2p", false);
  o.op = str_or(j, "op");
  o.dtype = str_or(j, "dtype");
  o.algorithm = str_or(j, "algorithm");
  o.state = str_or(j, "state");
  o.error = str_or(j, "error");
  o.count = j.value("count", std::uint64_t{0});
  o.bytes = j.value("bytes", std::uint64_t{0});
  o.root = int_or(j, "root", -1);
  o.peer = int_or(j, "peer", -1);
  o.issued_us = j.value("issued_us", std::int64_t{0});
  o.started_us = j.value("started_us", std::int64_t{0});
  o.ended_us = j.value("ended_us", std::int64_t{0});
  return o;
}

// What must agree between ranks at one collective sequence number.
std::string signature(const OpRecord& o) {
  std::string s = fmt::format("{} {} x {}", o.op, o.count, o.dtype);
  if (o.root >= 0) {
    s += fmt::format(" root {}", o.root);
  }
  return s;
}

std::string rank_list(const std::vector<int>& ranks) {
  std::string out;
  for (std::size_t i = 0; i < ranks.size(); ++i) {
    out += (i == 0 ? "" : ", ") + std::to_string(ranks[i]);
  }
  return out;
}

const OpRecord* last_collective(const GroupView& v) {
  for (auto it = v.ops.rbegin(); it != v.ops.rend(); ++it) {
    if (!it->p2p) {
      return &*it;
    }
  }
  return nullptr;
}

std::string ms_since(std::int64_t t_us, std::int64_t origin_us) {
  return t_us == 0 ? "-" : fmt::format("{:.1f}", static_cast<double>(t_us - origin_us) / 1000.0);
}

void report_group(std::ostringstream& out, const std::string& name,
                  const std::vector<const GroupView*>& views, std::size_t last_ops) {
  int size = 1;
  for (const GroupView* v : views) {
    size = std::max(size, v->size);
  }
  std::map<int, const GroupView*> by_rank;
  for (const GroupView* v : views) {
    by_rank[v->rank] = v;  // a rank dumped twice: the file read last wins
  }
  out << fmt::format("group '{}' ({} ranks): dumps from {} of them\n", name, size, by_rank.size());

  // 1. The first failure: the earliest failure time any rank recorded.
  const GroupView* first = nullptr;
  for (const auto& [rank, v] : by_rank) {
    if (v->failure_us != 0 && (first == nullptr || v->failure_us < first->failure_us)) {
      first = v;
    }
  }
  if (first != nullptr) {
    out << fmt::format("  first failure: rank {} ({} pid {}): {}\n", first->rank, first->host,
                       first->pid, first->failure);
  } else {
    out << "  no rank recorded a failure (dumped on request)\n";
  }

  // 2. The rank every other failed rank names: where to look first (a partition shows as that
  // rank naming the others while they all name it).
  std::map<int, int> named_by;
  int failed = 0;
  for (const auto& [rank, v] : by_rank) {
    if (v->failure_us == 0) {
      continue;
    }
    ++failed;
    for (int p : std::set<int>(v->failure_peers.begin(), v->failure_peers.end())) {
      if (p != rank) {
        ++named_by[p];
      }
    }
  }
  std::string naming;
  for (const auto& [rank, v] : by_rank) {
    if (v->failure_us != 0 && !v->failure_peers.empty()) {
      naming += fmt::format("{}rank {} names {}", naming.empty() ? "" : "; ", rank,
                            rank_list(v->failure_peers));
    }
  }
  if (!naming.empty()) {
    out << "  failures: " << naming << "\n";
  }
  for (const auto& [suspect, count] : named_by) {
    const int others = failed - (by_rank.count(suspect) && by_rank.at(suspect)->failure_us ? 1 : 0);
    if (failed >= 2 && count == others) {
      out << fmt::format(
          "  named by every other failed rank: rank {} (start there: its log, its "
          "host, its link)\n",
          suspect);
    }
  }

  // 3. Ranks that never reported.
  std::vector<int> missing;
  for (int r = 0; r < size; ++r) {
    if (!by_rank.count(r)) {
      missing.push_back(r);
    }
  }
  if (!missing.empty()) {
    out << fmt::format(
        "  never reported: rank {} (no dump: the process was killed, is stopped or hung, or its "
        "host's trace directory was not collected)\n",
        rank_list(missing));
  }

  // 4. Ranks behind: the lowest last-issued collective sequence number.
  std::uint64_t highest = 0;
  for (const auto& [rank, v] : by_rank) {
    if (const OpRecord* o = last_collective(*v)) {
      highest = std::max(highest, o->seq);
    }
  }
  std::vector<int> behind;
  std::uint64_t lowest = highest;
  for (const auto& [rank, v] : by_rank) {
    const OpRecord* o = last_collective(*v);
    const std::uint64_t seq = o ? o->seq : 0;
    if (seq < lowest) {
      lowest = seq;
      behind.clear();
    }
    if (seq == lowest && seq < highest) {
      behind.push_back(rank);
    }
  }
  if (!behind.empty()) {
    out << fmt::format(
        "  behind: rank {} last issued collective seq {}, the others reached seq {}: it stopped "
        "issuing (still computing, stuck, or took another code path)\n",
        rank_list(behind), lowest, highest);
  }

  // 5. Mismatches: one sequence number, different collectives.
  std::map<std::uint64_t, std::map<std::string, std::vector<int>>> by_seq;
  for (const auto& [rank, v] : by_rank) {
    for (const OpRecord& o : v->ops) {
      if (!o.p2p) {
        by_seq[o.seq][signature(o)].push_back(rank);
      }
    }
  }
  int mismatches = 0;
  for (const auto& [seq, signatures] : by_seq) {
    if (signatures.size() < 2) {
      continue;
    }
    std::string parts;
    for (const auto& [sig, ranks] : signatures) {
      parts += fmt::format("{}rank {}: {}", parts.empty() ? "" : "; ", rank_list(ranks), sig);
    }
    out << fmt::format("  mismatch at seq {}: {}\n", seq, parts);
    if (++mismatches == 5) {
      out << "  (further mismatches not shown)\n";
      break;
    }
  }

  // 6. Each rank's last ops, times in ms from the earliest op shown.
  std::int64_t origin = 0;
  for (const auto& [rank, v] : by_rank) {
    const std::size_t from = v->ops.size() > last_ops ? v->ops.size() - last_ops : 0;
    for (std::size_t i = from; i < v->ops.size(); ++i) {
      if (origin == 0 || v->ops[i].issued_us < origin) {
        origin = v->ops[i].issued_us;
      }
    }
  }
  out << fmt::format("  last {} ops per rank (times in ms):\n", last_ops);
  out << fmt::format("    {:>4} {:>6} {:<15} {:<26} {:<18} {:<9} {:>9} {:>9} {:>9}\n", "rank",
                     "seq", "op", "data", "algorithm", "state", "issued", "started", "ended");
  for (const auto& [rank, v] : by_rank) {
    const std::size_t from = v->ops.size() > last_ops ? v->ops.size() - last_ops : 0;
    for (std::size_t i = from; i < v->ops.size(); ++i) {
      const OpRecord& o = v->ops[i];
      std::string data = fmt::format("{} x {}", o.count, o.dtype);
      if (o.root >= 0) {
        data += fmt::format(" root {}", o.root);
      }
      if (o.peer >= 0) {
        data += fmt::format(" peer {}", o.peer);
      }
      out << fmt::format("    {:>4} {:>6} {:<15} {:<26} {:<18} {:<9} {:>9} {:>9} {:>9}\n", rank,
                         o.p2p ? "p" + std::to_string(o.seq) : std::to_string(o.seq), o.op, data,
                         o.algorithm.empty() ? "-" : o.algorithm, o.state,
                         ms_since(o.issued_us, origin), ms_since(o.started_us, origin),
                         ms_since(o.ended_us, origin));
      if (!o.error.empty()) {
        out << fmt::format("           error: {}\n", o.error);
      }
    }
  }
}

}  // namespace

std::vector<GroupView> parse_dump(const std::string& text, const std::string& file) {
  const json doc = json::parse(text);
  if (doc.value("format", std::string()) != "chorus-flight-recorder") {
    throw std::runtime_error("not a chorus flight recorder dump (no \"format\" field)");
  }
  const json& process = doc.at("process");
  std::vector<GroupView> views;
  for (const json& g : doc.at("groups")) {
    GroupView v;
    v.file = file;
    v.reason = str_or(doc, "reason");
    v.host = str_or(process, "host");
    v.pid = process.value("pid", 0LL);
    v.name = g.at("name").get<std::string>();
    v.rank = g.at("rank").get<int>();
    v.size = g.at("size").get<int>();
    v.recorded = g.value("recorded", std::uint64_t{0});
    v.failure = str_or(g, "failure");
    v.failure_us = g.value("failure_us", std::int64_t{0});
    if (const auto it = g.find("failure_peers"); it != g.end() && it->is_array()) {
      for (const json& p : *it) {
        if (p.is_number_integer()) {
          v.failure_peers.push_back(p.get<int>());
        }
      }
    }
    for (const json& o : g.at("ops")) {
      v.ops.push_back(parse_op(o));
    }
    views.push_back(std::move(v));
  }
  return views;
}

namespace {

// What load_dumps reads of a file before deciding whether it is a dump.
constexpr std::size_t kHeadBytes = 4096;

bool looks_like_dump(std::string_view head) {
  // The writer's keys are sorted: "format" comes second, within the first hundred bytes.
  // Whitespace around the colon is allowed, so a file reformatted by hand still counts.
  const std::size_t start = head.find_first_not_of(" \t\r\n");
  if (start == std::string_view::npos || head[start] != '{') {
    return false;
  }
  constexpr std::string_view kKey = "\"format\"";
  constexpr std::string_view kValue = "\"chorus-flight-recorder\"";
  for (std::size_t at = head.find(kKey); at != std::string_view::npos;
       at = head.find(kKey, at + 1)) {
    std::size_t p = head.find_first_not_of(" \t\r\n", at + kKey.size());
    if (p == std::string_view::npos || head[p] != ':') {
      continue;
    }
    p = head.find_first_not_of(" \t\r\n", p + 1);
    if (p != std::string_view::npos && head.substr(p, kValue.size()) == kValue) {
      return true;
    }
  }
  return false;
}

std::vector<GroupView> read_dump(const std::filesystem::path& path, std::uint64_t max_bytes) {
  // O_NONBLOCK: a FIFO named *.json must not hang the tool; fstat below turns it away.
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK);
  if (fd < 0) {
    throw std::runtime_error(fmt::format("cannot open it: {}", std::strerror(errno)));
  }
  std::FILE* file = ::fdopen(fd, "r");
  if (file == nullptr) {
    ::close(fd);
    throw std::runtime_error(fmt::format("cannot read it: {}", std::strerror(errno)));
  }
  const std::unique_ptr<std::FILE, int (*)(std::FILE*)> owner(file, &std::fclose);
  struct stat st {};
  if (::fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
    throw std::runtime_error("not a regular file");
  }
  // Recognize a dump by its first bytes before reading the rest: any other file in the
  // folder costs at most kHeadBytes, whatever its size.
  std::string head(kHeadBytes, '\0');
  head.resize(std::fread(head.data(), 1, head.size(), file));
  if (!looks_like_dump(head)) {
    throw std::runtime_error(fmt::format(
        "not a chorus flight recorder dump (no \"format\": \"chorus-flight-recorder\" in its "
        "first {} bytes; the rest of its {} bytes was not read)",
        kHeadBytes, static_cast<std::uint64_t>(st.st_size)));
  }
  if (static_cast<std::uint64_t>(st.st_size) > max_bytes) {
    throw std::runtime_error(fmt::format(
        "{} MiB, more than the {} MiB chorus-trace reads of one dump (a dump of the default "
        "2048 entries per group is well under 1 MiB per group); not read. --max-dump-mib N "
        "raises the bound",
        static_cast<std::uint64_t>(st.st_size) >> 20, max_bytes >> 20));
  }
  // Read through the descriptor that was checked, and never past the bound, even if the
  // file grows meanwhile.
  std::rewind(file);
  std::string text;
  text.reserve(static_cast<std::size_t>(st.st_size));
  char buf[1 << 16];
  for (std::size_t n; (n = std::fread(buf, 1, sizeof buf, file)) > 0;) {
    if (text.size() + n > max_bytes) {
      throw std::runtime_error(
          fmt::format("grew past {} MiB while being read; not read", max_bytes >> 20));
    }
    text.append(buf, n);
  }
  return parse_dump(text, path.filename().string());
}

}  // namespace

std::vector<GroupView> load_dumps(const std::string& dir, std::vector<std::string>& problems,
                                  std::uint64_t max_dump_bytes) {
  std::vector<std::filesystem::path> files;
  for (const auto& entry : std::filesystem::directory_iterator(dir)) {
    if (entry.path().extension() == ".json" && entry.is_regular_file()) {
      files.push_back(entry.path());
    }
  }
  std::sort(files.begin(), files.end());
  std::vector<GroupView> views;
  for (const auto& path : files) {
    try {
      for (GroupView& v : read_dump(path, max_dump_bytes)) {
        views.push_back(std::move(v));
      }
    } catch (const std::exception& e) {
      problems.push_back(fmt::format("{}: skipped: {}", path.string(), e.what()));
    }
  }
  return views;
}

std::string report(const std::vector<GroupView>& views, std::size_t last_ops) {
  std::map<std::string, std::vector<const GroupView*>> groups;
  for (const GroupView& v : views) {
    groups[v.name].push_back(&v);
  }
  std::ostringstream out;
  for (const auto& [name, members] : groups) {
    report_group(out, name, members, last_ops);
  }
  return out.str();
}

}  // namespace chorus::trace_tool
