#pragma once
// The JSON of `lodge list`: a row's object as nlohmann builds it (list_json), and the same
// bytes written straight into the listing's output buffer (write_list_json), the per-row
// cost of `lodge --json list` over a million rows.

#include <lodge/ledger/records.hpp>
#include <nlohmann/json_fwd.hpp>
#include <string>
#include <string_view>

namespace lodge::ops {

// `lodge list --json`: one row.
[[nodiscard]] nlohmann::json list_json(const ledger::FileRecord &f);

// The same line, appended to out without building it as an object: keys in the same
// (alphabetical) order, strings escaped as nlohmann's dump with error_handler_t::replace
// escapes them (invalid UTF-8 as U+FFFD), so the bytes are list_json(f)'s dump.
void write_list_json(std::string &out, const ledger::FileRecord &f);

// Whether text is JSON that nlohmann's dump of its parse writes back byte for byte (what
// store::to_json leaves in object_options): no whitespace, object keys without escapes in
// strictly increasing byte order, strings of well-formed UTF-8 with only the escapes dump
// writes, integers of at most 18 digits, true, false, null. write_list_json copies such
// object_options as they are; false (a float, "\u00e9", a duplicate key, bad JSON...) only
// means nlohmann parses and dumps it.
[[nodiscard]] bool is_canonical_json(std::string_view text);

} // namespace lodge::ops
