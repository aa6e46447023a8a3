// Running a compiler's plan as tasks: each task once its inputs' maker and every barrier before
// it are done, several at a time, and what each printed kept in plan order. Toolkit-free, with
// unit tests of its own (tests/unit/launcher_plan_test.cpp).
#pragma once

#include <cstddef>
#include <functional>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace kcache::launcher {

// What a step printed: printed at the compile's end, in plan order.
struct Printed {
  std::string out, err;
  void add(std::string_view o, std::string_view e) { out += o, err += e; }
};

// One step of a plan: what it runs (printing into the Printed it is given), the work folder's
// files it names (its inputs and outputs), and whether it must wait for every step before it and
// hold back every step after it (removals, variable assignments, the host compile, which
// includes files the plan does not name).
struct Task {
  std::function<bool(Printed&)> run;
  std::vector<std::string> files;
  bool barrier = false;
  // Where what it prints goes among the tasks' (its own index by default): a plan run out of its
  // order keeps each step's in the plan's.
  std::optional<std::size_t> slot;
};

// Runs the tasks, each once the task that first named each of its files (its maker: plans name
// a file first where they write it) and every earlier barrier have finished, up to `parallel` at
// a time: each arch's chain of steps, and the preprocessors, overlap as the plan's order allows.
// `printed` gets what each task printed, at its slot (resized to hold every slot). False at the
// first failure (the tasks already running finish first; none starts after).
bool run_plan(const std::vector<Task>& tasks, std::vector<Printed>& printed, std::size_t parallel);

// The files of the work folder `work` an argument list names, alone or inside an argument
// (--image3=kind=elf,sm=80,file=F).
std::vector<std::string> work_files(const std::vector<std::string>& argv, std::string_view work);

}  // namespace kcache::launcher
