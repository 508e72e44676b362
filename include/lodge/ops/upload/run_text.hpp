#pragma once
// The text of an upload run's progress: the line a terminal redraws, the plain --stats line a
// log keeps, and -v's word on each change of an adaptive run's level. Strings: the caller
// prints them (and clears the terminal's line).

#include <lodge/ops/upload/concurrency.hpp>
#include <lodge/ops/upload/run.hpp>
#include <string>

namespace lodge::ops {

// The progress line of a terminal (without its control codes): until the walk ends the
// totals are lower bounds, said with a "+"; the ETA is the files left at the pace so far.
[[nodiscard]] std::string progress_line(const RunProgress &p);
// A --stats line: plain text for a log, never a terminal control. Until the walk ends the
// totals are lower bounds, said with a "+". The rate is the average since the start; the
// ETA is the bytes left at that rate ("-" while unknown). The final line says "done".
[[nodiscard]] std::string stats_line(const RunProgress &p, bool final);
// -v: why an adaptive run's level moved.
[[nodiscard]] std::string level_change_line(const LevelChange &c);
// The final --stats line's word on the requests in flight.
[[nodiscard]] std::string concurrency_of(const RunConcurrency &c);

} // namespace lodge::ops
