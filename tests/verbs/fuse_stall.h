// A FUSE file system in this process that serves one file, "f" (one page), and never answers a
// READ: memory mapped from that file is memory whose pages never come (issue 27, item 6). The
// kernel's FUSE protocol spoken directly on /dev/fuse (linux/fuse.h), so no libfuse is needed;
// mounting needs root, and without it mounted() is false. The destructor aborts the connection
// (closing /dev/fuse fails every request still waiting, which frees whatever thread waits on a
// page of the file) and detaches the mount.
#pragma once

#include <fcntl.h>
#include <linux/fuse.h>
#include <poll.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

namespace rrdma::verbs::test {

class StallingFuse {
 public:
  StallingFuse() {
    if (::geteuid() != 0) return;
    device_ = ::open("/dev/fuse", O_RDWR | O_CLOEXEC);
    if (device_ < 0 || ::mkdtemp(directory_) == nullptr) return;
    const std::string options = "fd=" + std::to_string(device_) + ",rootmode=40000,user_id=0,group_id=0";
    if (::mount("rrdma-stall", directory_, "fuse", MS_NOSUID | MS_NODEV, options.c_str()) != 0) return;
    mounted_ = true;
    if (::pipe2(stop_, O_CLOEXEC) != 0) return;
    server_ = std::thread([this] { serve(); });
  }
  ~StallingFuse() {
    if (server_.joinable()) {
      [[maybe_unused]] const ssize_t n = ::write(stop_[1], "s", 1);
      server_.join();  // the server closed /dev/fuse: the connection is aborted
    } else if (device_ >= 0) {
      ::close(device_);
    }
    for (const int fd : stop_)
      if (fd >= 0) ::close(fd);
    if (mounted_) ::umount2(directory_, MNT_DETACH);
    if (directory_[sizeof(directory_) - 2] != 'X') ::rmdir(directory_);
  }
  StallingFuse(const StallingFuse&) = delete;
  StallingFuse& operator=(const StallingFuse&) = delete;

  bool mounted() const { return mounted_; }
  // A process forked after the mount must close these: a copy of /dev/fuse kept open keeps the
  // connection from being aborted.
  std::vector<int> descriptors() const { return {device_, stop_[0], stop_[1]}; }
  std::string file() const { return std::string(directory_) + "/f"; }
  // READs the kernel asked for.
  int reads_asked() const { return reads_.load(); }
  // READs answered (with EIO) because nothing else freed their waiter within kGiveUp: a
  // test that stalls for good would otherwise hang instead of failing.
  int reads_answered() const { return answered_.load(); }
  static constexpr int kGiveUpMs = 15000;

 private:
  static constexpr std::uint64_t kFileNode = 2;

  template <typename Body>
  void reply(std::uint64_t unique, const Body& body) {
    std::vector<std::uint8_t> out(sizeof(fuse_out_header) + sizeof(Body));
    const fuse_out_header header{static_cast<std::uint32_t>(out.size()), 0, unique};
    std::memcpy(out.data(), &header, sizeof header);
    std::memcpy(out.data() + sizeof header, &body, sizeof body);
    [[maybe_unused]] const ssize_t n = ::write(device_, out.data(), out.size());
  }
  void reply_error(std::uint64_t unique, int error) {
    const fuse_out_header header{sizeof(fuse_out_header), -error, unique};
    [[maybe_unused]] const ssize_t n = ::write(device_, &header, sizeof header);
  }
  static fuse_attr attributes(std::uint64_t node) {
    fuse_attr a{};
    a.ino = node;
    a.mode = node == FUSE_ROOT_ID ? (S_IFDIR | 0755) : (S_IFREG | 0666);
    a.nlink = 1;
    a.size = node == FUSE_ROOT_ID ? 0 : 4096;
    a.blksize = 4096;
    return a;
  }

  void serve() {
    std::vector<std::uint8_t> request(FUSE_MIN_READ_BUFFER + 65536);
    for (;;) {
      pollfd ready[2] = {{device_, POLLIN, 0}, {stop_[0], POLLIN, 0}};
      const int polled = ::poll(ready, 2, kGiveUpMs);
      if (polled > 0 && ready[1].revents != 0) {
        ::close(device_);  // the last /dev/fuse of the connection: every waiting request fails
        device_ = -1;
        return;
      }
      if (polled == 0) {
        for (const std::uint64_t unique : waiting_) reply_error(unique, EIO);
        answered_ += static_cast<int>(waiting_.size());
        waiting_.clear();
        continue;
      }
      if (polled < 0 && errno == EINTR) continue;
      if (polled < 0 || (ready[0].revents & POLLIN) == 0) return;  // aborted
      const ssize_t n = ::read(device_, request.data(), request.size());
      if (n < 0 && (errno == EINTR || errno == ENOENT)) continue;
      if (n < static_cast<ssize_t>(sizeof(fuse_in_header))) return;  // aborted, unmounted
      fuse_in_header in{};
      std::memcpy(&in, request.data(), sizeof in);
      answer(in, reinterpret_cast<const char*>(request.data() + sizeof in));
    }
  }

  void answer(const fuse_in_header& in, const char* argument) {
    switch (in.opcode) {
      case FUSE_INIT: {
        fuse_init_out out{};
        out.major = FUSE_KERNEL_VERSION;
        out.minor = FUSE_KERNEL_MINOR_VERSION;
        out.max_readahead = 4096;
        out.max_write = 4096;
        out.max_background = 4;
        out.congestion_threshold = 4;
        return reply(in.unique, out);
      }
      case FUSE_LOOKUP: {
        if (std::strcmp(argument, "f") != 0) return reply_error(in.unique, ENOENT);
        fuse_entry_out out{};
        out.nodeid = kFileNode;
        out.attr = attributes(kFileNode);
        return reply(in.unique, out);
      }
      case FUSE_GETATTR: {
        fuse_attr_out out{};
        out.attr = attributes(in.nodeid);
        return reply(in.unique, out);
      }
      case FUSE_OPEN: return reply(in.unique, fuse_open_out{});
      case FUSE_READ:  // never answered (but see kGiveUpMs)
        ++reads_;
        waiting_.push_back(in.unique);
        return;
      case FUSE_FORGET: case FUSE_BATCH_FORGET: case FUSE_INTERRUPT: return;  // no answer expected
      default: return reply_error(in.unique, ENOSYS);
    }
  }

  int device_ = -1;
  int stop_[2] = {-1, -1};
  char directory_[32] = "/tmp/rrdma-fuse-XXXXXX";
  bool mounted_ = false;
  std::atomic<int> reads_{0};
  std::atomic<int> answered_{0};
  std::vector<std::uint64_t> waiting_;
  std::thread server_;
};

}  // namespace rrdma::verbs::test
