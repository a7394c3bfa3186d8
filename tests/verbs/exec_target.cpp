// The program a DMA test's child execs (dma_process_test.cpp, "an exec at the same pid"):
// it maps a page at the address given on its command line, fills it with a byte, says
// "ready" on stdout and waits to be killed. Had the daemon kept reaching the pid, it would
// now reach this page, which is not the memory that was registered.
#include <sys/mman.h>
#include <unistd.h>

#include <cstdint>
#include <cstdlib>
#include <cstring>

int main(int argc, char** argv) {
  if (argc != 3) return 2;
  const std::uintptr_t address = std::strtoull(argv[1], nullptr, 0);
  const int fill = std::atoi(argv[2]);
  void* page = ::mmap(reinterpret_cast<void*>(address), 4096, PROT_READ | PROT_WRITE,
                      MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED_NOREPLACE, -1, 0);
  if (page != reinterpret_cast<void*>(address)) return 3;
  std::memset(page, fill, 4096);
  if (::write(STDOUT_FILENO, "ready", 5) != 5) return 4;
  ::alarm(60);  // never outlive a stuck test
  for (;;) ::pause();
}
