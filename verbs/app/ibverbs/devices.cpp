// Device discovery: a device is a running vnic, found by its control socket
// $RRDMA_RUN_DIR/NAME.sock (default /run/rrdma, docs/VERBS_DATAPATH.md "Finding a device";
// client::list_devices). RRDMA_DEVICES=NAME[,NAME...] restricts the list to those vnics (what
// `rrdma-vnic exec --dev` sets). The device's paths are those rdma-core gives:
// ibdev_path /sys/class/infiniband/NAME, dev_path /sys/class/infiniband_verbs/uverbsN, which
// exist in the sysfs view `rrdma-vnic exec` lays out (docs/IBVERBS.md "The sysfs view");
// discovery never reads them.
#include <dirent.h>
#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "verbs/app/ibverbs/shim.h"
#include "verbs/app/sysfs_view.h"

namespace rrdma::ibverbs {
namespace {

// Devices by name, never freed (see DeviceBox).
struct Registry {
  std::mutex mutex;
  std::vector<std::unique_ptr<DeviceBox>> devices;
};
Registry& registry() {
  static Registry* instance = new Registry;  // never destroyed: programs call verbs from atexit
  return *instance;
}

std::vector<std::string> names_from_environment(const char* list) {
  std::vector<std::string> names;
  std::string_view rest = list;
  while (!rest.empty()) {
    const auto comma = rest.find(',');
    const auto name = rest.substr(0, comma);
    if (!name.empty() && std::find(names.begin(), names.end(), name) == names.end())
      names.emplace_back(name);
    if (comma == std::string_view::npos) break;
    rest.remove_prefix(comma + 1);
  }
  return names;
}

void copy_string(char (&out)[IBV_SYSFS_NAME_MAX], const std::string& text) {
  std::snprintf(out, sizeof out, "%s", text.c_str());
}
void copy_path(char (&out)[IBV_SYSFS_PATH_MAX], const std::string& text) {
  std::snprintf(out, sizeof out, "%s", text.c_str());
}

// The file's first line, at most a device name long; empty when it cannot be read.
std::string first_line(const std::string& path) {
  char text[IBV_SYSFS_NAME_MAX + 1] = {};
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return {};
  const ssize_t got = ::read(fd, text, sizeof text - 1);
  ::close(fd);
  if (got <= 0) return {};
  const std::string_view line(text, static_cast<std::size_t>(got));
  return std::string(line.substr(0, line.find('\n')));
}

// The N of the view's infiniband_verbs/uverbsN whose ibdev file names `name`; `fallback`
// (our own index) without a view: rdma-core's names, that lead nowhere then.
std::size_t uverbs_number(const std::string& name, std::size_t fallback) {
  const std::string dir = std::string(verbs::sysfs::kClassRoot) + "/" + std::string(verbs::sysfs::kVerbsClass);
  DIR* listing = ::opendir(dir.c_str());
  if (listing == nullptr) return fallback;
  std::size_t found = fallback;
  while (const dirent* entry = ::readdir(listing)) {
    const std::string_view file(entry->d_name);
    if (!file.starts_with("uverbs")) continue;
    if (first_line(dir + "/" + std::string(file) + "/ibdev") != name) continue;
    char* end = nullptr;
    const unsigned long number = std::strtoul(entry->d_name + 6, &end, 10);
    if (end != entry->d_name + 6 && *end == '\0') found = number;
    break;
  }
  ::closedir(listing);
  return found;
}

DeviceBox* device_named(Registry& reg, const std::string& name) {
  for (auto& device : reg.devices)
    if (name == device->device.name) return device.get();
  auto box = std::make_unique<DeviceBox>();
  std::memset(&box->device, 0, sizeof box->device);
  box->device.node_type = IBV_NODE_CA;
  box->device.transport_type = IBV_TRANSPORT_IB;
  const std::size_t uverbs = uverbs_number(name, reg.devices.size());
  copy_string(box->device.name, name);
  copy_string(box->device.dev_name, "uverbs" + std::to_string(uverbs));
  copy_path(box->device.dev_path, verbs::sysfs::uverbs_path(uverbs));
  copy_path(box->device.ibdev_path, verbs::sysfs::device_path(name));
  box->index = static_cast<int>(reg.devices.size());
  box->guid = 0;
  box->guid_known = false;
  reg.devices.push_back(std::move(box));
  return reg.devices.back().get();
}

}  // namespace

}  // namespace rrdma::ibverbs

using namespace rrdma::ibverbs;

extern "C" {

RRDMA_EXPORT ibv_device** ibv_get_device_list(int* num_devices) {
  std::vector<std::string> names;
  for (const auto& entry : client::list_devices()) names.push_back(entry.name);
  if (const char* wanted = std::getenv("RRDMA_DEVICES"); wanted != nullptr && *wanted != '\0') {
    const auto allowed = names_from_environment(wanted);
    std::erase_if(names, [&](const std::string& name) {
      return std::find(allowed.begin(), allowed.end(), name) == allowed.end();
    });
  }
  auto** list = static_cast<ibv_device**>(std::calloc(names.size() + 1, sizeof(ibv_device*)));
  if (list == nullptr) return fail_null<ibv_device*>(ENOMEM);
  Registry& reg = registry();
  std::lock_guard lock(reg.mutex);
  for (std::size_t i = 0; i < names.size(); ++i) list[i] = &device_named(reg, names[i])->device;
  if (num_devices != nullptr) *num_devices = static_cast<int>(names.size());
  return list;
}

RRDMA_EXPORT void ibv_free_device_list(ibv_device** list) { std::free(list); }

RRDMA_EXPORT const char* ibv_get_device_name(ibv_device* device) {
  return device != nullptr ? device->name : nullptr;
}

RRDMA_EXPORT int ibv_get_device_index(ibv_device* device) {
  return device != nullptr ? box_of(device)->index : -1;
}

}  // extern "C"
