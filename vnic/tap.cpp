#include "vnic/tap.h"

#include <fcntl.h>
#include <linux/if.h>
#include <linux/if_tun.h>
#include <sys/ioctl.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <system_error>
#include <utility>

namespace rrdma::vnic {

TapDevice TapDevice::create(const std::string& name) {
  if (name.empty() || name.size() >= IFNAMSIZ) {
    throw std::system_error(EINVAL, std::generic_category(), "TAP name '" + name + "'");
  }
  // Non-blocking: io_uring then arms a poll instead of parking a worker thread on a read.
  const int fd = ::open("/dev/net/tun", O_RDWR | O_NONBLOCK | O_CLOEXEC);
  if (fd < 0) throw std::system_error(errno, std::generic_category(), "open /dev/net/tun");
  ifreq request{};
  request.ifr_flags = static_cast<short>(IFF_TAP | IFF_NO_PI | IFF_TUN_EXCL);
  std::memcpy(request.ifr_name, name.c_str(), name.size());
  if (::ioctl(fd, TUNSETIFF, &request) != 0) {
    const int error = errno;
    ::close(fd);
    throw std::system_error(error, std::generic_category(), "create TAP " + name);
  }
  return TapDevice(fd, name);
}

TapDevice::TapDevice(TapDevice&& other) noexcept
    : fd_(std::exchange(other.fd_, -1)), name_(std::move(other.name_)) {}

TapDevice& TapDevice::operator=(TapDevice&& other) noexcept {
  if (this != &other) {
    close();
    fd_ = std::exchange(other.fd_, -1);
    name_ = std::move(other.name_);
  }
  return *this;
}

TapDevice::~TapDevice() { close(); }

void TapDevice::close() {
  if (fd_ >= 0) ::close(std::exchange(fd_, -1));
}

}  // namespace rrdma::vnic
