// SPDX-License-Identifier: BSD-3-Clause
// Checkpoints: a small self-checking file format (magic, version, dtype, count, FNV-1a of the
// payload), written atomically; and the rank-0-saves / everyone-loads protocol.
#include <chorus/ddp.hpp>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <memory>

#include <fmt/format.h>

#include <chorus/work.hpp>

namespace chorus::ddp {
namespace {

constexpr char kMagic[8] = {'C', 'H', 'O', 'R', 'U', 'S', 'C', 'K'};
constexpr std::uint32_t kFormatVersion = 1;

struct Header {
  char magic[8];
  std::uint32_t version;
  std::uint32_t dtype;
  std::uint64_t count;
  std::uint64_t checksum;  // FNV-1a 64 of the payload
};

std::uint64_t fnv1a(const void* data, std::size_t n) {
  const auto* p = static_cast<const std::uint8_t*>(data);
  std::uint64_t h = 0xcbf29ce484222325ULL;
  for (std::size_t i = 0; i < n; ++i) {
    h = (h ^ p[i]) * 0x100000001b3ULL;
  }
  return h;
}

struct FileCloser {
  void operator()(std::FILE* f) const noexcept { std::fclose(f); }
};
using File = std::unique_ptr<std::FILE, FileCloser>;

[[noreturn]] void io_error(const char* what, const std::string& path, int err) {
  throw InvalidArgument(
      fmt::format("checkpoint: cannot {} '{}': {}; check that the directory exists, "
                  "is writable/readable by every rank and the disk is not full",
                  what, path, std::strerror(err)));
}

void check_cpu(const Tensor& t, const char* fn) {
  if (!t.is_cpu()) {
    throw InvalidArgument(fmt::format(
        "{}: the tensor is on cuda:{}; checkpoints take CPU tensors (copy to host first)", fn,
        t.device().index));
  }
  if (t.count() > 0 && t.data() == nullptr) {
    throw InvalidArgument(fmt::format("{}: the tensor has {} elements but no data", fn, t.count()));
  }
}

}  // namespace

void save_checkpoint(const std::string& path, Tensor data) {
  check_cpu(data, "save_checkpoint");
  Header h{};
  std::memcpy(h.magic, kMagic, sizeof kMagic);
  h.version = kFormatVersion;
  h.dtype = static_cast<std::uint32_t>(data.dtype());
  h.count = data.count();
  h.checksum = fnv1a(data.data(), data.nbytes());
  const std::string tmp = path + ".tmp";
  {
    File f(std::fopen(tmp.c_str(), "wb"));
    if (!f) {
      io_error("create", tmp, errno);
    }
    if (std::fwrite(&h, sizeof h, 1, f.get()) != 1 ||
        (data.nbytes() > 0 && std::fwrite(data.data(), data.nbytes(), 1, f.get()) != 1) ||
        std::fflush(f.get()) != 0) {
      const int err = errno;
      std::remove(tmp.c_str());
      io_error("write", tmp, err);
    }
  }
  if (std::rename(tmp.c_str(), path.c_str()) != 0) {
    const int err = errno;
    std::remove(tmp.c_str());
    io_error("rename into", path, err);
  }
}

void load_checkpoint(const std::string& path, Tensor data) {
  check_cpu(data, "load_checkpoint");
  File f(std::fopen(path.c_str(), "rb"));
  if (!f) {
    io_error("open", path, errno);
  }
  Header h{};
  if (std::fread(&h, sizeof h, 1, f.get()) != 1 ||
      std::memcmp(h.magic, kMagic, sizeof kMagic) != 0) {
    throw InvalidArgument(fmt::format(
        "load_checkpoint: '{}' is not a chorus checkpoint (bad or short header)", path));
  }
  if (h.version != kFormatVersion) {
    throw InvalidArgument(
        fmt::format("load_checkpoint: '{}' has format version {}; this chorus reads version {}",
                    path, h.version, kFormatVersion));
  }
  if (h.dtype != static_cast<std::uint32_t>(data.dtype()) || h.count != data.count()) {
    const char* file_dtype = h.dtype < static_cast<std::uint32_t>(kNumDataTypes)
                                 ? to_string(static_cast<DataType>(h.dtype))
                                 : "?";
    throw InvalidArgument(fmt::format(
        "load_checkpoint: '{}' holds {} x {} but the tensor is {} x {}; load it into a tensor of the "
        "saved shape",
        path, h.count, file_dtype, data.count(), to_string(data.dtype())));
  }
  if (data.nbytes() > 0 && std::fread(data.data(), data.nbytes(), 1, f.get()) != 1) {
    throw InvalidArgument(fmt::format(
        "load_checkpoint: '{}' is truncated (expected {} payload bytes)", path, data.nbytes()));
  }
  if (fnv1a(data.data(), data.nbytes()) != h.checksum) {
    throw InvalidArgument(
        fmt::format("load_checkpoint: '{}' is corrupt (checksum mismatch); save it again", path));
  }
}

void checkpoint_and_reload(ProcessGroup& group, const std::string& path, Tensor data) {
  // Rank 0 saves, then broadcasts whether it succeeded: that broadcast is the barrier (no rank
  // reads before the file is complete) and lets every rank fail with rank 0's reason instead
  // of reading a missing file.
  std::int32_t status = 0;
  std::string error;
  if (group.rank() == 0) {
    try {
      save_checkpoint(path, data);
    } catch (const Error& e) {
      status = 1;
      error = e.what();
    }
  }
  group.broadcast(Tensor::of(&status, 1), RootOptions{.root = 0})->wait();
  if (status != 0) {
    if (group.rank() == 0) {
      throw InvalidArgument(error);
    }
    throw InvalidArgument(fmt::format(
        "checkpoint_and_reload on rank {}/{} [{}]: rank 0 failed to save '{}'; see rank 0's error",
        group.rank(), group.size(), group.name(), path));
  }
  load_checkpoint(path, data);
}

void broadcast_tensors(ProcessGroup& group, const std::vector<Tensor>& tensors, int root) {
  std::vector<std::shared_ptr<Work>> works;
  works.reserve(tensors.size());
  for (const Tensor& t : tensors) {
    works.push_back(group.broadcast(t, RootOptions{.root = root}));
  }
  for (auto& w : works) {
    w->wait();
  }
}

}  // namespace chorus::ddp
