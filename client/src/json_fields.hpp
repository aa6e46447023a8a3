// Strict readers for the fields of a JSON document kcache did not write itself (a manifest, a
// bundle index): each checks a field's type and range and, when it is wrong, names the field by
// its position ("modules[2].opt_level") and what it holds instead. Private to client/src.
//
// They throw Invalid, which never leaves the parser that uses them: each parser catches it at its
// entry point and returns it as an Error, so that the checks read as a list of fields.
#pragma once

#include <nlohmann/json.hpp>

#include <cmath>
#include <cstdint>
#include <cstdio>
#include <initializer_list>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "file_names.hpp"
#include "kcache/job.hpp"

namespace kcache::json_fields {

using json = nlohmann::json;

// A field that is wrong: its position and what is wrong with it.
struct Invalid {
  std::string at;
  std::string message;
};

[[noreturn]] inline void invalid(std::string at, std::string message) { throw Invalid{std::move(at), std::move(message)}; }

// What a value is, for a message: "the string \"3\"", "the number 3.5", "an array", ...
inline std::string describe(const json& v) {
  switch (v.type()) {
    case json::value_t::null: return "null";
    case json::value_t::boolean: return v.get<bool>() ? "true" : "false";
    case json::value_t::number_integer: return "the number " + std::to_string(v.get<std::int64_t>());
    case json::value_t::number_unsigned: return "the number " + std::to_string(v.get<std::uint64_t>());
    case json::value_t::number_float: {
      char text[32];
      std::snprintf(text, sizeof(text), "%g", v.get<double>());
      std::string shown = text;
      if (shown.find_first_of(".ein") == std::string::npos) shown += ".0";  // 3.0 is not the integer 3
      return "the number " + shown;
    }
    case json::value_t::string: return "the string " + quote_for_message(v.get_ref<const std::string&>());
    case json::value_t::array: return "an array";
    case json::value_t::object: return "an object";
    default: return "a value of no JSON type";
  }
}

[[noreturn]] inline void expected(const std::string& at, const std::string& what, const json& got) {
  invalid(at, "expected " + what + ", got " + describe(got));
}

inline std::string child(const std::string& at, std::string_view name) {
  return at.empty() ? std::string(name) : at + "." + std::string(name);
}
inline std::string element(const std::string& at, std::size_t i) { return at + "[" + std::to_string(i) + "]"; }

// `v` must be an object whose fields are all in `known` (a typo must not pass silently).
inline void require_object(const json& v, const std::string& at, std::optional<std::initializer_list<std::string_view>> known) {
  if (!v.is_object()) expected(at.empty() ? "the document" : at, "an object", v);
  if (!known) return;
  for (const auto& [name, value] : v.items()) {
    bool found = false;
    for (std::string_view k : *known) found = found || k == name;
    if (!found) {
      std::string names;
      for (std::string_view k : *known) names += (names.empty() ? "" : ", ") + std::string(k);
      invalid(child(at, quote_for_message(name)), "unknown field (known: " + names + ")");
    }
  }
}

// The field `name` of object `v`, or nullptr when absent.
inline const json* find(const json& v, std::string_view name) {
  auto it = v.find(name);
  return it == v.end() ? nullptr : &*it;
}

inline const json& required(const json& v, const std::string& at, std::string_view name) {
  const json* f = find(v, name);
  if (f == nullptr) invalid(child(at, name), "missing (it is required)");
  return *f;
}

// A string of at most `max_bytes`, without NUL; `non_empty` refuses "".
inline std::string string_value(const json& f, const std::string& at, bool non_empty = false,
                                std::size_t max_bytes = 4096) {
  if (!f.is_string()) expected(at, non_empty ? "a non-empty string" : "a string", f);
  const std::string& s = f.get_ref<const std::string&>();
  if (non_empty && s.empty()) expected(at, "a non-empty string", f);
  if (s.size() > max_bytes) invalid(at, "longer than " + std::to_string(max_bytes) + " bytes");
  if (s.find('\0') != std::string::npos) invalid(at, "contains a NUL byte");
  return s;
}

inline std::string string_field(const json& v, const std::string& at, std::string_view name, std::string fallback,
                                std::size_t max_bytes = 4096) {
  const json* f = find(v, name);
  return f == nullptr ? fallback : string_value(*f, child(at, name), false, max_bytes);
}

inline bool bool_field(const json& v, const std::string& at, std::string_view name, bool fallback) {
  const json* f = find(v, name);
  if (f == nullptr) return fallback;
  if (!f->is_boolean()) expected(child(at, name), "true or false", *f);
  return f->get<bool>();
}

// An integer in [lo, hi] (a float such as 3.0 is refused: the schema says integer).
inline std::uint64_t integer_value(const json& f, const std::string& at, std::uint64_t lo, std::uint64_t hi) {
  std::string range = "an integer " + std::to_string(lo) + "-" + std::to_string(hi);
  if (f.is_number_unsigned()) {
    auto n = f.get<std::uint64_t>();
    if (n < lo || n > hi) expected(at, range, f);
    return n;
  }
  if (f.is_number_integer()) {
    auto n = f.get<std::int64_t>();
    if (n < 0 || static_cast<std::uint64_t>(n) < lo || static_cast<std::uint64_t>(n) > hi) expected(at, range, f);
    return static_cast<std::uint64_t>(n);
  }
  expected(at, range, f);
}

// An array of at most `max_count` elements.
inline const json& array_value(const json& f, const std::string& at, std::size_t max_count) {
  if (!f.is_array()) expected(at, "an array", f);
  if (f.size() > max_count) invalid(at, "more than " + std::to_string(max_count) + " elements");
  return f;
}

inline std::vector<std::string> strings_field(const json& v, const std::string& at, std::string_view name,
                                              std::size_t max_count, bool non_empty = true) {
  const json* f = find(v, name);
  if (f == nullptr) return {};
  std::string here = child(at, name);
  std::vector<std::string> out;
  const json& array = array_value(*f, here, max_count);
  for (std::size_t i = 0; i < array.size(); ++i) out.push_back(string_value(array[i], element(here, i), non_empty));
  return out;
}

// `"a", "b", "c"`: the names of every value of an enumeration (all_kinds(), with kind_name), as
// enum_value lists them.
template <typename T, typename Name>
std::string quoted_names(std::span<const T> values, Name name) {
  std::string out;
  for (const T& v : values) out += (out.empty() ? "\"" : ", \"") + std::string(name(v)) + "\"";
  return out;
}

// What enum_value lists for a bad "kind" or "side", from the tables in kcache/job.hpp.
inline const std::string& kind_names() {
  static const std::string names = quoted_names(all_kinds(), kind_name);
  return names;
}
inline const std::string& side_names() {
  static const std::string names = quoted_names(all_sides(), side_name);
  return names;
}

// A string that `parse` accepts (one of `names`), for enumerations such as "side".
template <typename Parse>
auto enum_value(const json& f, const std::string& at, Parse parse, std::string_view names) {
  if (!f.is_string()) expected(at, "one of " + std::string(names), f);
  auto value = parse(f.get_ref<const std::string&>());
  if (!value) expected(at, "one of " + std::string(names), f);
  return *value;
}

// Lower-case hex of exactly `digits` digits (a key, a SHA-256).
inline std::string hex_value(const json& f, const std::string& at, std::size_t digits) {
  std::string what = std::to_string(digits) + " lower-case hex digits";
  if (!f.is_string()) expected(at, what, f);
  const std::string& s = f.get_ref<const std::string&>();
  bool ok = s.size() == digits;
  for (char c : s) ok = ok && ((c >= '0' && c <= '9') || (c >= 'a' && c <= 'f'));
  if (!ok) expected(at, what, f);
  return s;
}

}  // namespace kcache::json_fields
