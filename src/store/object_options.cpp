#include <cctype>
#include <lodge/store/object_options.hpp>
#include <lodge/util/strings.hpp>
#include <nlohmann/json.hpp>

namespace lodge::store {

void ObjectOptions::merge(const ObjectOptions &over) {
  if (!over.content_type.empty()) content_type = over.content_type;
  for (const auto &[k, v] : over.metadata)
    metadata[k] = v;
  for (const auto &[k, v] : over.tags)
    tags[k] = v;
  if (!over.storage_class.empty()) storage_class = over.storage_class;
  if (!over.sse.empty()) {
    // A new encryption choice replaces the old one whole: a KMS key id of the policy's
    // aws:kms never rides along with an AES256 asked on the command line.
    if (over.sse != sse) sse_kms_key_id.clear();
    sse = over.sse;
  }
  if (!over.sse_kms_key_id.empty()) sse_kms_key_id = over.sse_kms_key_id;
  if (!over.cache_control.empty()) cache_control = over.cache_control;
}

namespace {

Error usage(std::string_view what, const std::string &why) {
  return Error(Errc::usage, std::string(what) + ": " + why);
}

bool printable_ascii(std::string_view s) {
  for (char ch : s)
    if (static_cast<unsigned char>(ch) < 0x20 || static_cast<unsigned char>(ch) > 0x7e) return false;
  return true;
}

bool tag_text(std::string_view s) {
  for (char ch : s)
    if (!std::isalnum(static_cast<unsigned char>(ch)) &&
        std::string_view(" +-=._:/@").find(ch) == std::string_view::npos)
      return false;
  return true;
}

// RFC 6838 names: a letter or digit, then letters, digits and ! # $ & - ^ _ . +
bool media_name(std::string_view n) {
  if (n.empty() || n.size() > 127 || !std::isalnum(static_cast<unsigned char>(n[0]))) return false;
  for (char ch : n)
    if (!std::isalnum(static_cast<unsigned char>(ch)) &&
        std::string_view("!#$&-^_.+").find(ch) == std::string_view::npos)
      return false;
  return true;
}

bool content_type_ok(std::string_view t) {
  auto semi = t.find(';');
  auto base = util::trim(std::string(t.substr(0, semi)));
  auto slash = base.find('/');
  if (slash == std::string::npos) return false;
  if (!media_name(std::string_view(base).substr(0, slash)) ||
      !media_name(std::string_view(base).substr(slash + 1)))
    return false;
  return semi == std::string_view::npos || printable_ascii(t.substr(semi));
}

std::string shown(std::string_view s) {
  return "'" + util::escape_for_terminal(std::string(s)) + "'";
}

} // namespace

Status validate(const ObjectOptions &o, std::string_view what) {
  const std::string w(what);
  if (!o.content_type.empty() && (!content_type_ok(o.content_type) || o.content_type.size() > 256))
    return usage(w + " content type",
                 "expected type/subtype, optionally with parameters (text/css; charset=utf-8), got " +
                     shown(o.content_type));
  size_t meta_bytes = 0;
  for (const auto &[k, v] : o.metadata) {
    bool name_ok = !k.empty() && k.size() <= 128 && std::isalpha(static_cast<unsigned char>(k[0]));
    for (char ch : k)
      name_ok = name_ok && (std::islower(static_cast<unsigned char>(ch)) ||
                            std::isdigit(static_cast<unsigned char>(ch)) || ch == '_');
    if (!name_ok)
      return usage(w + " metadata",
                   "a name is 1-128 lowercase letters, digits and '_', starting with a letter "
                   "(one every store takes), got " +
                       shown(k));
    if (k.rfind("lodge", 0) == 0)
      return usage(w + " metadata", shown(k) + " is lodge's own: names starting with \"lodge\" are reserved");
    if (!printable_ascii(v))
      return usage(w + " metadata", "the value of " + k + " must be printable ASCII (HTTP headers carry it)");
    // An HTTP server trims a header value: S3 would keep "x" of " x ", the ledger " x ".
    if (!v.empty() && (v.front() == ' ' || v.back() == ' '))
      return usage(w + " metadata", "the value of " + k +
                                        " starts or ends with a space, which the store would drop (HTTP "
                                        "trims header values): " +
                                        shown(v));
    meta_bytes += k.size() + v.size();
  }
  if (meta_bytes > k_max_user_metadata_bytes)
    return usage(w + " metadata", "names and values come to " + std::to_string(meta_bytes) +
                                      " bytes; at most " + std::to_string(k_max_user_metadata_bytes) +
                                      " are allowed");
  if (o.tags.size() > k_max_tags)
    return usage(w + " tags", std::to_string(o.tags.size()) + " tags; an object takes at most " +
                                  std::to_string(k_max_tags));
  for (const auto &[k, v] : o.tags) {
    if (k.empty() || k.size() > 128 || !tag_text(k))
      return usage(w + " tags",
                   "a tag key is 1-128 letters, digits, spaces and + - = . _ : / @, got " + shown(k));
    if (v.size() > 256 || !tag_text(v))
      return usage(w + " tags",
                   "a tag value is 0-256 letters, digits, spaces and + - = . _ : / @ (tag " + k + ")");
    if (k.rfind("aws:", 0) == 0)
      return usage(w + " tags", "keys starting with aws: are AWS's own: " + shown(k));
    if (k == "lodge-state") return usage(w + " tags", "lodge-state is lodge's own tag");
  }
  if (!o.storage_class.empty()) {
    bool ok = o.storage_class.size() <= 64;
    for (char ch : o.storage_class)
      ok = ok && (std::isalnum(static_cast<unsigned char>(ch)) || ch == '_');
    if (!ok)
      return usage(w + " storage class",
                   "expected a name like STANDARD_IA or GLACIER_IR, got " + shown(o.storage_class));
  }
  if (!o.sse.empty() && o.sse != "AES256" && o.sse != "aws:kms")
    return usage(w + " sse", "expected AES256 or aws:kms, got " + shown(o.sse));
  if (!o.sse_kms_key_id.empty()) {
    if (o.sse != "aws:kms") return usage(w + " sse-kms-key-id", "a KMS key id needs sse aws:kms");
    if (!printable_ascii(o.sse_kms_key_id) || o.sse_kms_key_id.size() > 2048)
      return usage(w + " sse-kms-key-id", "expected a key id, alias or ARN, got " + shown(o.sse_kms_key_id));
  }
  if (!o.cache_control.empty() && (!printable_ascii(o.cache_control) || o.cache_control.size() > 1024))
    return usage(w + " cache-control",
                 "expected printable ASCII like 'max-age=3600', got " + shown(o.cache_control));
  return ok_status();
}

Result<std::pair<std::string, std::string>> parse_assignment(std::string_view text, std::string_view flag) {
  auto eq = text.find('=');
  if (eq == std::string_view::npos || eq == 0)
    return Error(Errc::usage, std::string(flag) + ": expected NAME=VALUE, got " + shown(text));
  return std::pair<std::string, std::string>{std::string(text.substr(0, eq)),
                                             std::string(text.substr(eq + 1))};
}

std::string to_json(const ObjectOptions &o) {
  nlohmann::json j = nlohmann::json::object();
  if (!o.cache_control.empty()) j["cache_control"] = o.cache_control;
  if (!o.content_type.empty()) j["content_type"] = o.content_type;
  if (!o.metadata.empty()) j["metadata"] = o.metadata;
  if (!o.sse.empty()) j["sse"] = o.sse;
  if (!o.sse_kms_key_id.empty()) j["sse_kms_key_id"] = o.sse_kms_key_id;
  if (!o.storage_class.empty()) j["storage_class"] = o.storage_class;
  if (!o.tags.empty()) j["tags"] = o.tags;
  return j.empty() ? std::string{} : j.dump(); // nlohmann's object is ordered by key
}

ObjectOptions from_json(std::string_view text) {
  ObjectOptions o;
  if (text.empty()) return o;
  auto j = nlohmann::json::parse(text, nullptr, false);
  auto text_of = [&](const char *k) {
    if (!j.contains(k)) return std::string{};
    if (!j[k].is_string())
      throw LodgeError(Errc::ledger_unusable, std::string("object_options.") + k + " is not text");
    return j[k].get<std::string>();
  };
  auto map_of = [&](const char *k) {
    std::map<std::string, std::string> m;
    if (!j.contains(k)) return m;
    if (!j[k].is_object())
      throw LodgeError(Errc::ledger_unusable, std::string("object_options.") + k + " is not an object");
    for (const auto &[name, v] : j[k].items()) {
      if (!v.is_string())
        throw LodgeError(Errc::ledger_unusable,
                         std::string("object_options.") + k + " holds a non-text value");
      m[name] = v.get<std::string>();
    }
    return m;
  };
  if (!j.is_object())
    throw LodgeError(Errc::ledger_unusable, "the row's object_options is not a JSON object");
  o.cache_control = text_of("cache_control");
  o.content_type = text_of("content_type");
  o.metadata = map_of("metadata");
  o.sse = text_of("sse");
  o.sse_kms_key_id = text_of("sse_kms_key_id");
  o.storage_class = text_of("storage_class");
  o.tags = map_of("tags");
  return o;
}

std::string s3_tagging(const std::map<std::string, std::string> &tags) {
  std::string out;
  for (const auto &[k, v] : tags) {
    if (!out.empty()) out += '&';
    out += util::percent_encode(k, false) + "=" + util::percent_encode(v, false);
  }
  return out;
}

} // namespace lodge::store
