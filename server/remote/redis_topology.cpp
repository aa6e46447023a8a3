#include "remote/redis_topology.hpp"

#include <arpa/inet.h>

#include <algorithm>
#include <array>
#include <cctype>
#include <charconv>

namespace kcache::server::remote {
namespace {

// ---- URLs and addresses -----------------------------------------------------------------------

Error bad_url(const std::string& what) { return make_error(ErrorCode::k_invalid_argument, "Redis URL: " + what); }

// A host name or IPv4 address: letters, digits, '.', '-', '_'.
bool is_host_name(std::string_view host) {
  return !host.empty() && host.size() <= 253 && std::all_of(host.begin(), host.end(), [](char c) {
    return std::isalnum(static_cast<unsigned char>(c)) || c == '.' || c == '-' || c == '_';
  });
}

bool is_ipv6_address(std::string_view host) {
  if (host.empty() || host.size() > INET6_ADDRSTRLEN) return false;
  in6_addr address{};
  return inet_pton(AF_INET6, std::string(host).c_str(), &address) == 1;
}

// 1..65535 written in decimal digits alone; nullopt otherwise.
std::optional<int> parse_port_number(std::string_view text) {
  int port = 0;
  if (text.empty() || text.size() > 5 || text.find_first_not_of("0123456789") != std::string_view::npos) {
    return std::nullopt;
  }
  std::from_chars(text.data(), text.data() + text.size(), port);
  if (port < 1 || port > 65535) return std::nullopt;
  return port;
}

// HOST:PORT or [V6ADDR]:PORT, one seed of a URL.
Expected<RedisEndpoint> parse_url_endpoint(std::string_view piece) {
  if (piece.empty()) return bad_url("an empty HOST:PORT (nothing after '://', or a stray ',')");
  std::string_view host;
  std::string_view port;
  if (piece.front() == '[') {
    auto close = piece.find(']');
    if (close == std::string_view::npos) return bad_url("'[' without ']' in " + quoted(piece));
    host = piece.substr(1, close - 1);
    std::string_view rest = piece.substr(close + 1);
    if (rest.empty()) return bad_url("no :PORT after " + quoted(piece));
    if (rest.front() != ':') return bad_url("junk after ']' in " + quoted(piece));
    port = rest.substr(1);
    if (!is_ipv6_address(host)) return bad_url(quoted(host) + " in brackets is not an IPv6 address");
  } else {
    auto colon = piece.rfind(':');
    if (colon == std::string_view::npos) return bad_url("no :PORT in " + quoted(piece));
    host = piece.substr(0, colon);
    port = piece.substr(colon + 1);
    if (host.empty()) return bad_url("an empty host in " + quoted(piece));
    if (host.find(':') != std::string_view::npos) {
      return bad_url("an IPv6 address needs brackets ([ADDR]:PORT): " + quoted(piece));
    }
    if (!is_host_name(host)) return bad_url("host " + quoted(host) + " is not a host name or address");
  }
  if (port.empty()) return bad_url("an empty port in " + quoted(piece));
  if (port.find_first_not_of("0123456789") != std::string_view::npos) {
    return bad_url("port " + quoted(port) + " is not a number");
  }
  auto number = parse_port_number(port);
  if (!number) return bad_url("port " + quoted(port) + " is out of range (1-65535)");
  return RedisEndpoint{std::string(host), *number};
}

// ---- what cluster nodes say -------------------------------------------------------------------

constexpr std::array<std::uint16_t, 256> make_crc16_table() {
  std::array<std::uint16_t, 256> table{};
  for (unsigned i = 0; i < 256; ++i) {
    unsigned crc = i << 8;
    for (int bit = 0; bit < 8; ++bit) crc = (crc & 0x8000) ? (crc << 1) ^ 0x1021 : crc << 1;
    table[i] = static_cast<std::uint16_t>(crc);
  }
  return table;
}
constexpr auto k_crc16_table = make_crc16_table();

// CRC16-XMODEM (polynomial 0x1021, initial 0), as Redis Cluster's crc16.c.
std::uint16_t crc16(std::string_view data) {
  unsigned crc = 0;
  for (unsigned char c : data) crc = ((crc << 8) ^ k_crc16_table[((crc >> 8) ^ c) & 0xff]) & 0xffff;
  return static_cast<std::uint16_t>(crc);
}

Error malformed_slots(const RedisEndpoint& from, const std::string& what) {
  return make_error(ErrorCode::k_unavailable,
                    "Redis " + endpoint_name(from) + ": malformed CLUSTER SLOTS reply: " + what);
}

// A node's host as a node sent it: empty or "?" is the answering node's own.
std::optional<std::string> sent_host(std::string_view host, const RedisEndpoint& answered_by) {
  if (host.empty() || host == "?") return answered_by.host;
  if (!is_host_name(host) && !is_ipv6_address(host)) return std::nullopt;
  return std::string(host);
}

// [host, port, id?, extras?] from CLUSTER SLOTS.
Expected<RedisEndpoint> slots_node(const RedisReply& node, const RedisEndpoint& answered_by, std::size_t range) {
  std::string where = "range " + std::to_string(range) + ": ";
  if (node.type != RedisReply::Type::array || node.elements.size() < 2 ||
      node.elements[0].type != RedisReply::Type::string || node.elements[1].type != RedisReply::Type::integer) {
    return malformed_slots(answered_by, where + "a node is not [host, port, ...]");
  }
  auto host = sent_host(node.elements[0].str, answered_by);
  if (!host) return malformed_slots(answered_by, where + "host " + quoted(node.elements[0].str));
  long long port = node.elements[1].integer;
  if (port < 1 || port > 65535) return malformed_slots(answered_by, where + "port " + std::to_string(port));
  return RedisEndpoint{*host, static_cast<int>(port)};
}

bool is_slot(const RedisReply& r) {
  return r.type == RedisReply::Type::integer && r.integer >= 0 && r.integer < k_slot_count;
}

}  // namespace

std::string quoted(std::string_view text) {
  std::string out = "'";
  for (char c : text.substr(0, 64)) out += (c >= 0x20 && c < 0x7f) ? c : '?';
  if (text.size() > 64) out += "...";
  return out + "'";
}

std::string endpoint_name(const RedisEndpoint& endpoint) {
  std::string port = std::to_string(endpoint.port);
  if (endpoint.host.find(':') != std::string::npos) return "[" + endpoint.host + "]:" + port;
  return endpoint.host + ":" + port;
}

Expected<RedisOptions> parse_redis_url(std::string_view url) {
  auto separator = url.find("://");
  if (url.empty()) return bad_url("empty");
  if (separator == std::string_view::npos) {
    return bad_url("no scheme: expected redis://HOST:PORT or redis-cluster://HOST:PORT[,HOST:PORT...]");
  }
  std::string_view scheme = url.substr(0, separator);
  RedisOptions options;
  if (scheme == "redis-cluster") {
    options.cluster = true;
  } else if (scheme == "rediss" || scheme == "rediss-cluster") {
    return bad_url("TLS (" + std::string(scheme) + "://) is not supported: hiredis 0.14 has no TLS");
  } else if (scheme != "redis") {
    return bad_url("unknown scheme " + quoted(scheme) + " (expected redis:// or redis-cluster://)");
  }
  std::string_view rest = url.substr(separator + 3);
  if (auto at = rest.find('@'); at != std::string_view::npos) {
    std::string_view user = rest.substr(0, at);
    // Neither the user nor anything before '@' is repeated: it may be a password typed there.
    if (user.find(':') != std::string_view::npos) {
      return bad_url("a password in the URL is refused (it would show in ps and in logs): give it in a file");
    }
    if (user.empty()) return bad_url("an empty user name before '@'");
    if (!std::all_of(user.begin(), user.end(), [](char c) {
          return std::isalnum(static_cast<unsigned char>(c)) || c == '.' || c == '-' || c == '_';
        })) {
      return bad_url("the user name has characters other than letters, digits, '.', '-' and '_'");
    }
    options.user = user;
    rest = rest.substr(at + 1);
  }
  if (auto junk = rest.find_first_of("/?#@"); junk != std::string_view::npos) {
    const char* what = rest[junk] == '/'   ? "a path (database number) is not supported"
                       : rest[junk] == '?' ? "query parameters are not supported"
                       : rest[junk] == '#' ? "a fragment is not supported"
                                           : "more than one '@'";
    return bad_url(std::string(what) + ": " + quoted(rest.substr(junk)));
  }
  std::size_t start = 0;
  while (true) {
    auto comma = rest.find(',', start);
    auto endpoint = parse_url_endpoint(rest.substr(start, comma == std::string_view::npos ? comma : comma - start));
    if (!endpoint) return endpoint.error();
    for (const RedisEndpoint& seen : options.seeds) {
      if (seen.host == endpoint->host && seen.port == endpoint->port) {
        return bad_url("seed " + endpoint_name(seen) + " is listed twice");
      }
    }
    options.seeds.push_back(std::move(*endpoint));
    if (comma == std::string_view::npos) break;
    start = comma + 1;
  }
  if (!options.cluster && options.seeds.size() > 1) {
    return bad_url("redis:// takes one HOST:PORT; for several seeds use redis-cluster://");
  }
  return options;
}

std::uint16_t key_slot(std::string_view key) {
  if (auto open = key.find('{'); open != std::string_view::npos) {
    auto close = key.find('}', open + 1);
    if (close != std::string_view::npos && close > open + 1) key = key.substr(open + 1, close - open - 1);
  }
  return crc16(key) & (k_slot_count - 1);
}

Expected<std::vector<RedisSlotRange>> parse_cluster_slots(const RedisReply& reply, const RedisEndpoint& answered_by) {
  if (reply.type != RedisReply::Type::array) return malformed_slots(answered_by, "not an array");
  std::vector<bool> seen(k_slot_count, false);
  std::vector<RedisSlotRange> ranges;
  ranges.reserve(reply.elements.size());
  for (std::size_t i = 0; i < reply.elements.size(); ++i) {
    const RedisReply& entry = reply.elements[i];
    std::string where = "range " + std::to_string(i) + ": ";
    if (entry.type != RedisReply::Type::array || entry.elements.size() < 3) {
      return malformed_slots(answered_by, where + "not [first, last, primary, replicas...]");
    }
    if (!is_slot(entry.elements[0]) || !is_slot(entry.elements[1]) ||
        entry.elements[0].integer > entry.elements[1].integer) {
      return malformed_slots(answered_by, where + "slots are not first <= last within 0..16383");
    }
    RedisSlotRange range;
    range.first = static_cast<std::uint16_t>(entry.elements[0].integer);
    range.last = static_cast<std::uint16_t>(entry.elements[1].integer);
    for (int slot = range.first; slot <= range.last; ++slot) {
      if (seen[slot]) return malformed_slots(answered_by, where + "slot " + std::to_string(slot) + " listed twice");
      seen[slot] = true;
    }
    for (std::size_t n = 2; n < entry.elements.size(); ++n) {
      auto node = slots_node(entry.elements[n], answered_by, i);
      if (!node) return node.error();
      range.nodes.push_back(std::move(*node));
    }
    ranges.push_back(std::move(range));
  }
  return ranges;
}

Expected<std::optional<RedisRedirect>> parse_redirect(std::string_view error, const RedisEndpoint& answered_by) {
  std::string_view word = error.substr(0, error.find(' '));
  RedisRedirect redirect;
  if (word == "TRYAGAIN" || word == "CLUSTERDOWN") {
    redirect.kind = word == "TRYAGAIN" ? RedisRedirect::Kind::try_again : RedisRedirect::Kind::cluster_down;
    return std::optional<RedisRedirect>(redirect);
  }
  if (word != "MOVED" && word != "ASK") return std::optional<RedisRedirect>();
  redirect.kind = word == "MOVED" ? RedisRedirect::Kind::moved : RedisRedirect::Kind::ask;
  auto malformed = [&] {
    return make_error(ErrorCode::k_unavailable,
                      "Redis " + endpoint_name(answered_by) + ": malformed redirect " + quoted(error));
  };
  // "MOVED <slot> <host>:<port>", the host without brackets even for IPv6.
  std::string_view rest = error.substr(word.size());
  if (rest.size() < 2 || rest.front() != ' ') return malformed();
  rest.remove_prefix(1);
  auto space = rest.find(' ');
  if (space == std::string_view::npos) return malformed();
  std::string_view slot_text = rest.substr(0, space);
  std::string_view address = rest.substr(space + 1);
  int slot = -1;
  if (slot_text.empty() || slot_text.size() > 5 ||
      slot_text.find_first_not_of("0123456789") != std::string_view::npos) {
    return malformed();
  }
  std::from_chars(slot_text.data(), slot_text.data() + slot_text.size(), slot);
  auto colon = address.rfind(':');
  if (slot < 0 || slot >= k_slot_count || colon == std::string_view::npos) return malformed();
  auto host = sent_host(address.substr(0, colon), answered_by);
  auto port = parse_port_number(address.substr(colon + 1));
  if (!host || !port) return malformed();
  redirect.slot = static_cast<std::uint16_t>(slot);
  redirect.target = RedisEndpoint{std::move(*host), *port};
  return std::optional<RedisRedirect>(std::move(redirect));
}

}  // namespace kcache::server::remote
