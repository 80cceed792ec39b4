// SPDX-License-Identifier: BSD-3-Clause
// The store server's requests (see tcp_store_server.hpp): what each op does to the table and
// answers (the set/get/add fast path, handle_request), what a reply will cost the memory
// budget, and the requests that wait (parked watches, wait_clients) and their replies. Kept
// apart from tcp_store_server.cpp, which moves bytes between sockets and these functions.
#include <algorithm>
#include <cstring>

#include <fmt/format.h>

#include "core/bytes.hpp"
#include "store/server_connection.hpp"

namespace chorus::store {
namespace {

// Parked (waiting) requests per connection: one per client thread is the normal case.
constexpr std::size_t kMaxParkedPerConnection = 4096;

// The keys a waiting request waits for: get_with waits for its first key only (the others are
// read with it, present or not); get, wait and multi_get wait for all of theirs.
std::vector<std::string> awaited_keys(Op op, const std::vector<std::string>& keys) {
  if (op == Op::get_with) {
    return {keys.at(0)};
  }
  return keys;
}

Duration clamp_ms(std::uint64_t ms) {
  constexpr std::uint64_t kMax = std::uint64_t{1} << 60;
  return Duration(static_cast<Duration::rep>(std::min(ms, kMax)));
}

}  // namespace

Server::Simple Server::serve_simple(Conn& c, const SimpleRequest& s) {
  // Each case: refuse the rare paths, pay for the reply (as serve() does), then pop the frame
  // and answer. The views stay valid after pop(): the input buffer only moves when it is fed.
  constexpr std::size_t kHeader = net::kFrameHeaderBytes + 5;  // length, status, request id
  auto begin_reply = [&](std::size_t body) {
    if (c.out.empty()) {
      c.last_output = Clock::now();  // the stall clock starts with the first unsent reply
    }
    std::uint8_t* p = c.out.append(kHeader + body);
    net::put_u32(p, static_cast<std::uint32_t>(5 + body));
    p[4] = static_cast<std::uint8_t>(ReplyStatus::ok);
    net::put_u32(p + 5, s.id);
    return p + kHeader;
  };
  auto pay = [&](std::size_t cost) {
    const Afford a = afford(c, cost);
    if (a != Afford::yes) {
      block(c, a, cost);
      return false;
    }
    return true;
  };
  switch (s.op) {
    case Op::set: {
      Bytes* held = table_.find_slot(s.key);  // the one lookup of an overwrite
      const std::size_t growth = held == nullptr
                                     ? s.key.size() + s.value.size() + KvTable::kEntryOverhead
                                     : s.value.size() - std::min(s.value.size(), held->size());
      if (growth > 0 && table_.stored_bytes() + growth > options_.max_stored_bytes) {
        return Simple::general;  // the "store is full" error
      }
      if (!pay(kSmallReply)) {
        return Simple::blocked;
      }
      c.in.pop();
      c.did_request = true;
      if (held != nullptr) {
        table_.overwrite(*held, s.value);  // an existing key: no watch can fire
      } else {
        table_.set_view(s.key, s.value);
      }
      begin_reply(0);
      break;
    }
    case Op::get: {
      const Bytes* v = table_.find(s.key);
      if (v == nullptr || v->size() + 4 > net::OutputQueue::kCoalesceBytes) {
        return Simple::general;  // parked or a timeout reply; large values as before
      }
      if (!pay(kSmallReply + 4 + v->size())) {
        return Simple::blocked;
      }
      c.in.pop();
      c.did_request = true;
      std::uint8_t* p = begin_reply(4 + v->size());
      net::put_u32(p, static_cast<std::uint32_t>(v->size()));
      if (!v->empty()) {
        std::memcpy(p + 4, v->data(), v->size());
      }
      return Simple::served;  // nothing changed: no watch to wake
    }
    default: {  // add
      // The longest int64 has 20 digits; the lookup is needed only near the limit.
      constexpr std::size_t kDigits = 20;
      if (table_.stored_bytes() + s.key.size() + kDigits + KvTable::kEntryOverhead >
          options_.max_stored_bytes) {
        const std::size_t growth = table_.growth_if_set(s.key, kDigits);
        if (growth > 0 && table_.stored_bytes() + growth > options_.max_stored_bytes) {
          return Simple::general;
        }
      }
      if (!pay(kSmallReply + 256 + s.key.size())) {
        return Simple::blocked;
      }
      const KvTable::AddResult r = table_.add(s.key, s.delta);
      if (r.status != KvTable::AddResult::Status::ok) {
        return Simple::general;  // unchanged; handle_request words the error
      }
      c.in.pop();
      c.did_request = true;
      put_le(begin_reply(8), static_cast<std::uint64_t>(r.value), 8);
      break;
    }
  }
  if (table_.has_ready()) {
    deliver_ready();
  }
  return Simple::served;
}

std::size_t Server::reply_cost(const Request& q) const {
  std::size_t n = kSmallReply;
  switch (q.op) {
    case Op::get:
    case Op::multi_get:
    case Op::get_with:
    case Op::wait:
    case Op::check:
      // Present keys cost their value; missing ones their name (timeout reply, or parked).
      for (const auto& k : q.keys) {
        const Bytes* v = table_.find(k);
        n += 4 + ((v != nullptr && q.op != Op::wait && q.op != Op::check) ? v->size() : k.size());
      }
      return n;
    case Op::list_keys:
      return n + table_.key_bytes() + 4 * table_.size();
    case Op::compare_set: {
      const Bytes* v = table_.find(q.keys[0]);
      return n + std::max(v != nullptr ? v->size() : 0, q.values[1].size());
    }
    case Op::add:
      return n + 256 + q.keys[0].size();
    default:
      return n;
  }
}

std::size_t Server::parked_reply_bytes(const Parked& p) const {
  std::size_t n = 0;
  if (p.op != Op::wait) {
    for (const auto& k : p.keys) {
      const Bytes* v = table_.find(k);
      n += 4 + (v != nullptr ? v->size() : 0);
    }
  }
  return n;
}

std::size_t Server::priced_as_sent(std::size_t reply_bytes) const {
  // Over the limit, the reply that goes out is a short too_large error (handle_request,
  // deliver): priced at the would-be size, it would wait for budget it never uses.
  return reply_bytes > options_.max_reply_bytes ? kSmallReply + 512 : reply_bytes;
}

std::size_t Server::parked_cost(const Parked& p) const {
  return priced_as_sent(kSmallReply + parked_reply_bytes(p));
}

void Server::reply(Conn& c, Op op, const Reply& r) {
  if (c.out.empty()) {
    c.last_output = Clock::now();  // the stall clock starts with the first unsent reply
  }
  // Encoded into a reused buffer and copied into the output queue, where the replies of one
  // turn share a chunk (large ones keep their own buffer).
  thread_local std::vector<std::uint8_t> scratch;
  scratch.clear();
  encode_reply(op, r, scratch);
  if (scratch.size() <= net::OutputQueue::kCoalesceBytes) {
    c.out.append(std::span<const std::uint8_t>(scratch));
  } else {
    c.out.push(std::move(scratch));
    scratch = {};
  }
}

void Server::deliver(Conn& c, const Parked& p) {
  Reply r;
  r.id = p.request_id;
  if (p.op != Op::wait) {
    const std::size_t bytes = parked_reply_bytes(p);
    if (bytes > options_.max_reply_bytes) {
      r.status = ReplyStatus::error;
      r.error = ErrorKind::too_large;
      r.message = fmt::format(
          "{} would return {} bytes, over this server's limit of {} per reply "
          "(max_reply_bytes); ask for fewer keys per call",
          to_string(p.op), bytes, options_.max_reply_bytes);
      reply(c, p.op, r);
      return;
    }
    for (const auto& k : p.keys) {
      const Bytes* v = table_.find(k);
      r.values.push_back(v != nullptr ? *v : Bytes{});
      r.present.push_back(v != nullptr);
    }
  }
  reply(c, p.op, r);
}

void Server::park(Conn& c, const Request& q, Op op) {
  const KvTable::WatchId w = table_.add_watch(awaited_keys(op, q.keys));
  if (w == 0) {
    // Cannot happen (callers check first), but answering is always safe.
    Parked now;
    now.request_id = q.id;
    now.op = op;
    now.keys = q.keys;
    deliver(c, now);
    return;
  }
  auto p = std::make_unique<Parked>();
  p->conn = c.id;
  p->request_id = q.id;
  p->op = op;
  p->keys = q.keys;
  p->bytes = 128;
  for (const auto& k : q.keys) {
    p->bytes += k.size() + 64;
  }
  c.parked_bytes += p->bytes;
  p->timer =
      loop_.add_timer(Deadline::after(clamp_ms(q.timeout_ms)), [this, w] { on_watch_timeout(w); });
  parked_.emplace(w, std::move(p));
  c.watches.insert(w);
}

void Server::on_watch_timeout(KvTable::WatchId w) {
  auto p = parked_.find(w);
  if (p == parked_.end()) {
    return;
  }
  std::unique_ptr<Parked> parked = std::move(p->second);
  parked_.erase(p);
  table_.remove_watch(w);
  auto it = conns_.find(parked->conn);
  if (it == conns_.end()) {
    return;
  }
  Conn& c = *it->second;
  c.watches.erase(w);
  c.parked_bytes -= parked->bytes;
  Reply r;
  r.status = ReplyStatus::timeout;
  r.id = parked->request_id;
  r.keys = table_.missing(awaited_keys(parked->op, parked->keys));
  reply(c, parked->op, r);  // small: the names of missing keys, already counted while parked
  flush(c);
}

void Server::deliver_ready() {
  for (KvTable::WatchId w : table_.take_ready()) {
    auto p = parked_.find(w);
    if (p == parked_.end()) {
      continue;
    }
    std::unique_ptr<Parked> parked = std::move(p->second);
    parked_.erase(p);
    loop_.cancel_timer(parked->timer);
    auto it = conns_.find(parked->conn);
    if (it == conns_.end()) {
      continue;
    }
    Conn& c = *it->second;
    c.watches.erase(w);
    if (!c.deferred.empty()) {
      c.deferred.push_back(std::move(parked));  // behind earlier deferred replies; c is blocked
      continue;
    }
    const std::size_t cost = parked_cost(*parked);
    const Afford a = afford(c, cost);
    if (a != Afford::yes) {
      // The value is set but the reply is not affordable now: it goes out when budget frees.
      c.deferred.push_back(std::move(parked));
      block(c, a, cost);
      update_interest(c);
      continue;
    }
    c.parked_bytes -= parked->bytes;
    deliver(c, *parked);
    flush(c);
  }
}

void Server::check_client_waits() {
  std::vector<std::uint64_t> done;
  for (const auto& [wid, cw] : client_waits_) {
    if (members_joined_ >= static_cast<std::int64_t>(cw.count)) {
      done.push_back(wid);
    }
  }
  for (std::uint64_t wid : done) {
    ClientWait cw = client_waits_.at(wid);
    client_waits_.erase(wid);
    loop_.cancel_timer(cw.timer);
    auto it = conns_.find(cw.conn);
    if (it == conns_.end()) {
      continue;
    }
    it->second->client_waits.erase(wid);
    Reply r;
    r.id = cw.request_id;
    r.integer = members_joined_;
    reply(*it->second, Op::wait_clients, r);
    flush(*it->second);
  }
}

namespace {
Reply error_reply(std::uint32_t id, ErrorKind kind, std::string message) {
  Reply r;
  r.id = id;
  r.status = ReplyStatus::error;
  r.error = kind;
  r.message = std::move(message);
  return r;
}
}  // namespace

std::optional<Reply> Server::refuse_if_full(const Request& q) const {
  std::size_t growth = 0;
  switch (q.op) {
    case Op::set:
    case Op::multi_set:
      for (std::size_t i = 0; i < q.keys.size() && i < q.values.size(); ++i) {
        growth += table_.growth_if_set(q.keys[i], q.values[i].size());
      }
      break;
    case Op::compare_set:
      growth = table_.growth_if_set(q.keys[0], q.values[1].size());
      break;
    case Op::append: {
      const Bytes* held = table_.find(q.keys[0]);
      growth = table_.growth_if_set(q.keys[0],
                                    (held != nullptr ? held->size() : 0) + q.values[0].size());
      break;
    }
    case Op::add:
      growth = table_.growth_if_set(q.keys[0], 20);  // the longest int64 in decimal
      break;
    default:
      return std::nullopt;
  }
  if (growth == 0 || table_.stored_bytes() + growth <= options_.max_stored_bytes) {
    return std::nullopt;
  }
  return error_reply(
      q.id, ErrorKind::too_large,
      fmt::format("the store is full: it holds {} bytes of keys and values and this {} would add "
                  "{}, over this server's limit of {} (max_stored_bytes, chorus-store "
                  "--max-stored-bytes); nothing was stored. Delete keys that are no longer needed "
                  "(an earlier job's), or raise the limit",
                  table_.stored_bytes(), to_string(q.op), growth, options_.max_stored_bytes));
}

void Server::handle_request(Conn& c, Request& q) {
  if (auto refused = refuse_if_full(q)) {
    reply(c, q.op, *refused);
    return;
  }
  Reply r;
  r.id = q.id;
  bool mutated = false;
  switch (q.op) {
    case Op::set:
      table_.set(q.keys[0], std::move(q.values[0]));
      mutated = true;
      break;
    case Op::get:
    case Op::multi_get:
    case Op::get_with:
    case Op::wait: {
      if (q.op != Op::wait) {
        const std::size_t cost = reply_cost(q);
        if (cost > options_.max_reply_bytes) {
          r = error_reply(
              q.id, ErrorKind::too_large,
              fmt::format("{} of {} keys would return about {} bytes, over this "
                          "server's limit of {} per reply (max_reply_bytes); ask for "
                          "fewer keys per call",
                          to_string(q.op), q.keys.size(), cost, options_.max_reply_bytes));
          break;
        }
      }
      const auto missing = table_.missing(awaited_keys(q.op, q.keys));
      if (!missing.empty()) {
        if (q.timeout_ms == 0) {
          r.status = ReplyStatus::timeout;
          r.keys = missing;
          break;
        }
        if (c.watches.size() >= kMaxParkedPerConnection) {
          r = error_reply(q.id, ErrorKind::too_large,
                          fmt::format("{} waiting requests on one connection, the limit; a "
                                      "client thread waits for one at a time",
                                      c.watches.size()));
          break;
        }
        park(c, q, q.op);
        return;
      }
      if (q.op != Op::wait) {
        for (const auto& k : q.keys) {
          const Bytes* v = table_.find(k);
          r.values.push_back(v != nullptr ? *v : Bytes{});
          r.present.push_back(v != nullptr);
        }
      }
      break;
    }
    case Op::add: {
      const auto v = table_.add(q.keys[0], q.delta);
      if (v.status == KvTable::AddResult::Status::not_integer) {
        const Bytes* held = table_.find(q.keys[0]);
        r = error_reply(
            q.id, ErrorKind::not_integer,
            fmt::format("add('{}'): the key holds '{}', not an integer counter; use a key only as "
                        "a counter or only with set()",
                        q.keys[0],
                        printable_prefix(held->data(), std::min<std::size_t>(held->size(), 32))));
      } else if (v.status == KvTable::AddResult::Status::overflow) {
        r = error_reply(q.id, ErrorKind::bad_request,
                        counter_overflow_message(q.keys[0], v.value, q.delta));
      } else {
        r.integer = v.value;
        mutated = true;
      }
      break;
    }
    case Op::compare_set:
      r.values.push_back(table_.compare_set(q.keys[0], q.values[0], std::move(q.values[1])));
      mutated = true;
      break;
    case Op::check:
      r.flag = table_.missing(q.keys).empty();
      break;
    case Op::delete_key:
      r.flag = table_.erase(q.keys[0]);
      break;
    case Op::num_keys:
      r.integer = static_cast<std::int64_t>(table_.size());
      break;
    case Op::multi_set:
      for (std::size_t i = 0; i < q.keys.size(); ++i) {
        table_.set(q.keys[i], std::move(q.values[i]));
      }
      mutated = true;
      break;
    case Op::append: {
      const Bytes* held = table_.find(q.keys[0]);
      const std::size_t total = (held != nullptr ? held->size() : 0) + q.values[0].size();
      if (total > limits_.max_value_bytes) {
        r = error_reply(q.id, ErrorKind::too_large,
                        fmt::format("append('{}'): the value would grow to {} bytes, over the "
                                    "limit of {} (max_value_bytes); nothing was appended",
                                    q.keys[0], total, limits_.max_value_bytes));
        break;
      }
      table_.append(q.keys[0], q.values[0]);
      mutated = true;
      break;
    }
    case Op::list_keys: {
      const std::size_t cost = reply_cost(q);
      if (cost > options_.max_reply_bytes) {
        r = error_reply(q.id, ErrorKind::too_large,
                        fmt::format("list_keys would return about {} bytes for {} keys, over this "
                                    "server's limit of {} per reply (max_reply_bytes)",
                                    cost, table_.size(), options_.max_reply_bytes));
        break;
      }
      // Encoded once per key set: many list_keys calls on a large table cost a copy each,
      // not a sort and an encode each.
      if (!list_keys_cache_valid_ || list_keys_generation_ != table_.key_generation()) {
        list_keys_cache_.clear();
        encode_strings(table_.keys(), list_keys_cache_);
        list_keys_generation_ = table_.key_generation();
        list_keys_cache_valid_ = true;
      }
      r.encoded_body = &list_keys_cache_;
      break;
    }
    case Op::ping:
      break;
    case Op::wait_clients:
      if (members_joined_ >= static_cast<std::int64_t>(q.count)) {
        r.integer = members_joined_;
        break;
      }
      if (q.timeout_ms == 0) {
        r.status = ReplyStatus::timeout;
        r.message = fmt::format("{} of {} clients joined", members_joined_, q.count);
        break;
      }
      {
        const std::uint64_t wid = next_client_wait_++;
        const std::uint64_t conn = c.id;
        const std::uint32_t rid = q.id;
        const std::uint32_t count = q.count;
        const auto timer =
            loop_.add_timer(Deadline::after(clamp_ms(q.timeout_ms)), [this, wid, conn, rid, count] {
              client_waits_.erase(wid);
              auto it = conns_.find(conn);
              if (it == conns_.end()) {
                return;
              }
              it->second->client_waits.erase(wid);
              Reply t;
              t.status = ReplyStatus::timeout;
              t.id = rid;
              t.message = fmt::format("{} of {} clients joined", members_joined_, count);
              reply(*it->second, Op::wait_clients, t);
              flush(*it->second);
            });
        client_waits_.emplace(wid, ClientWait{conn, rid, count, timer});
        c.client_waits.insert(wid);
      }
      return;
  }
  reply(c, q.op, r);
  if (mutated) {
    deliver_ready();
  }
}

}  // namespace chorus::store
