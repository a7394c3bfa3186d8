// `rrdma-vnic exec` and `rrdma-vnic env`: run an unmodified verbs program over our
// libibverbs.so.1 (docs/IBVERBS.md), or print the variables that do it for a shell.
#pragma once

#include <string>
#include <vector>

#include <CLI/CLI.hpp>

namespace rrdma::cli {

struct ExecCommands {
  CLI::App* exec = nullptr;
  CLI::App* env = nullptr;
  std::string device;                 // --dev: the only vnic the program sees
  bool no_sysfs_view = false;         // exec --no-sysfs-view
  std::vector<std::string> command;   // PROGRAM ARGS...
};

// Declares both subcommands on `app`; their values land in `commands`.
void add_exec_commands(CLI::App& app, ExecCommands& commands);
// Returns only on error (the exit status: 1, or 126/127 as a shell does); execvp otherwise.
int run_exec(const ExecCommands& commands);
int run_env(const ExecCommands& commands);

}  // namespace rrdma::cli
