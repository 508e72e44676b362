#include <cctype>
#include <cerrno>
#include <cstdint>
#include <cstring>
#include <fstream>
#include <lodge/aws/aws_config.hpp>
#include <lodge/error.hpp>
#include <lodge/util/strings.hpp>
#include <sstream>
#include <sys/stat.h>

namespace lodge::aws {
namespace {
[[noreturn]] void bad_line(const std::string &path, int line, const std::string &why) {
  throw LodgeError(Errc::config_invalid, path + ":" + std::to_string(line) + ": " + why);
}

bool is_space(char c) {
  return c == ' ' || c == '\t' || c == '\r';
}

// An inline comment starts at a # or ; preceded by whitespace (the SDKs' file format;
// a value such as a secret never holds a space).
std::string strip_inline_comment(const std::string &s) {
  for (size_t i = 1; i < s.size(); ++i)
    if ((s[i] == '#' || s[i] == ';') && is_space(s[i - 1])) return s.substr(0, i);
  return s;
}

std::string label_of(const IniFile &f, const IniSection &s) {
  return "file " + f.path + " [" + s.name + "]";
}
} // namespace

const IniSection *IniFile::find(const std::string &name) const {
  auto it = sections.find(name);
  return it == sections.end() ? nullptr : &it->second;
}

IniFile parse_ini(const std::string &text, const std::string &path) {
  IniFile f;
  f.path = path;
  f.exists = true;
  std::istringstream in(text);
  std::string raw;
  int line = 0;
  IniSection *section = nullptr;
  IniValue *open = nullptr; // the last key, which indented lines continue or nest under
  while (std::getline(in, raw)) {
    ++line;
    if (line == 1 && raw.rfind("\xEF\xBB\xBF", 0) == 0) raw.erase(0, 3); // a UTF-8 BOM
    auto t = util::trim(raw);
    if (!t.empty() && t.back() == '\r') t = util::trim(t.substr(0, t.size() - 1));
    if (t.empty() || t[0] == '#' || t[0] == ';') continue;
    bool indented = is_space(raw[0]);
    if (indented && open) {
      auto body = util::trim(strip_inline_comment(t));
      if (open->value.empty()) {
        auto eq = body.find('=');
        if (eq == std::string::npos || util::trim(body.substr(0, eq)).empty())
          bad_line(path, line, "expected an indented 'name = value' sub-setting");
        open->sub[util::to_lower(util::trim(body.substr(0, eq)))] = util::trim(body.substr(eq + 1));
      } else {
        open->value += "\n" + body; // a continued value, as configparser joins them
      }
      continue;
    }
    if (t[0] == '[') {
      auto close = t.find(']');
      if (close == std::string::npos) bad_line(path, line, "a section header without its closing ']'");
      auto rest = util::trim(t.substr(close + 1));
      if (!rest.empty() && rest[0] != '#' && rest[0] != ';')
        bad_line(path, line, "unexpected text after the section header");
      auto name = util::trim(t.substr(1, close - 1));
      if (name.empty()) bad_line(path, line, "an empty section name");
      auto &s = f.sections[name]; // a repeated section adds to the first (later keys win)
      if (s.name.empty()) {
        s.name = name;
        s.line = line;
      }
      section = &s;
      open = nullptr;
      continue;
    }
    auto eq = t.find_first_of("=:");
    if (eq == std::string::npos) bad_line(path, line, "expected [section], 'name = value' or a comment");
    if (!section) bad_line(path, line, "a setting before any [section] header");
    auto key = util::to_lower(util::trim(t.substr(0, eq)));
    if (key.empty()) bad_line(path, line, "a setting without a name");
    IniValue v;
    v.value = util::trim(strip_inline_comment(" " + t.substr(eq + 1)));
    v.line = line;
    section->values[key] = v;
    open = &section->values[key];
  }
  return f;
}

IniFile read_ini(const std::string &path) {
  IniFile f;
  f.path = path;
  struct stat st {};
  if (path.empty() || ::stat(path.c_str(), &st) != 0) {
    if (!path.empty() && errno != ENOENT && errno != ENOTDIR)
      throw LodgeError(Errc::config_invalid, path + ": cannot read: " + std::strerror(errno));
    return f; // no file is no settings, as the CLI
  }
  if (S_ISDIR(st.st_mode)) throw LodgeError(Errc::config_invalid, path + ": cannot read: is a directory");
  std::ifstream in(path, std::ios::binary);
  if (!in) throw LodgeError(Errc::config_invalid, path + ": cannot read: " + std::strerror(errno));
  std::stringstream ss;
  ss << in.rdbuf();
  if (in.bad()) throw LodgeError(Errc::config_invalid, path + ": cannot read: " + std::strerror(errno));
  return parse_ini(ss.str(), path);
}

std::optional<uint64_t> parse_aws_size(const std::string &text) {
  auto t = util::to_lower(util::trim(text));
  // The CLI's own table (awscli/customizations/s3/utils.py): binary multiples only.
  static const std::pair<const char *, uint64_t> k_suffixes[] = {
      {"kib", 1ULL << 10}, {"mib", 1ULL << 20}, {"gib", 1ULL << 30}, {"tib", 1ULL << 40},
      {"kb", 1ULL << 10},  {"mb", 1ULL << 20},  {"gb", 1ULL << 30},  {"tb", 1ULL << 40}};
  uint64_t mult = 1;
  for (const auto &[suffix, m] : k_suffixes) {
    const std::string sfx = suffix;
    if (t.size() > sfx.size() && t.compare(t.size() - sfx.size(), sfx.size(), sfx) == 0) {
      t = util::trim(t.substr(0, t.size() - sfx.size()));
      mult = m;
      break;
    }
  }
  if (t.empty() || t.find_first_not_of("0123456789") != std::string::npos || t.size() > 19)
    return std::nullopt;
  const uint64_t n = std::stoull(t);
  if (n == 0 || n > UINT64_MAX / mult) return std::nullopt;
  return n * mult;
}

std::optional<uint64_t> parse_aws_rate(const std::string &text) {
  auto t = util::trim(text);
  auto l = util::to_lower(t);
  if (l.size() > 3 && l.compare(l.size() - 3, 3, "b/s") == 0) {
    t = t.substr(0, t.size() - 3); // "50MB/s" -> "50M", "1048576B/s" -> "1048576"
    if (!t.empty() && std::isalpha(static_cast<unsigned char>(t.back()))) t += "B"; // "50MB", "1MiB"
  } else if (l.find_first_not_of("0123456789") != std::string::npos) {
    return std::nullopt; // a size without "/s" is not a rate
  }
  return parse_aws_size(t);
}

std::string expand_home(const std::string &path, const std::string &home) {
  if (path == "~") return home;
  if (path.rfind("~/", 0) == 0) return home + path.substr(1);
  return path;
}

AwsShared::AwsShared(IniFile config, IniFile credentials, std::string profile, std::string profile_source)
    : m_config(std::move(config)), m_credentials(std::move(credentials)), m_profile(std::move(profile)),
      m_profile_source(std::move(profile_source)) {}

AwsShared AwsShared::load(const Inputs &in) {
  auto env = [&](const char *k) {
    auto it = in.env.find(k);
    return it == in.env.end() ? std::string{} : it->second;
  };
  std::string home = env("HOME");
  std::string config_path = env("AWS_CONFIG_FILE");
  config_path =
      config_path.empty() ? (home.empty() ? "" : home + "/.aws/config") : expand_home(config_path, home);
  std::string cred_path = env("AWS_SHARED_CREDENTIALS_FILE");
  cred_path =
      cred_path.empty() ? (home.empty() ? "" : home + "/.aws/credentials") : expand_home(cred_path, home);

  std::string profile = in.profile, source = in.profile_source;
  if (profile.empty() && !env("AWS_PROFILE").empty()) {
    profile = env("AWS_PROFILE");
    source = "env AWS_PROFILE";
  }
  if (profile.empty() && !env("AWS_DEFAULT_PROFILE").empty()) {
    profile = env("AWS_DEFAULT_PROFILE");
    source = "env AWS_DEFAULT_PROFILE";
  }
  if (profile.empty()) {
    profile = "default";
    source = "default";
  }
  AwsShared s(read_ini(config_path), read_ini(cred_path), profile, source);
  // A named profile neither file has is a mistake the CLI refuses; "default" may be absent.
  if (source != "default" && !s.config_section() && !s.credentials_section())
    throw LodgeError(Errc::config_invalid, "The config profile (" + profile +
                                               ") could not be found (named by " + source + "; looked in " +
                                               config_path + " and " + cred_path + ")");
  return s;
}

AwsShared AwsShared::for_profile(const std::string &profile) const {
  return {m_config, m_credentials, profile, "source_profile"};
}

const IniSection *AwsShared::config_section() const {
  if (m_profile == "default")
    if (const auto *s = m_config.find("default")) return s;
  return m_config.find("profile " + m_profile);
}

const IniSection *AwsShared::credentials_section() const {
  return m_credentials.find(m_profile);
}

std::optional<AwsValue> AwsShared::in_section(const IniFile &f, const IniSection *s, const std::string &key,
                                              const std::string &label) {
  if (!s) return std::nullopt;
  auto it = s->values.find(key);
  if (it == s->values.end() || it->second.value.empty()) return std::nullopt;
  return AwsValue{it->second.value, label.empty() ? label_of(f, *s) : label};
}

std::optional<AwsValue> AwsShared::get(const std::string &key) const {
  if (auto v = in_section(m_credentials, credentials_section(), key, {})) return v;
  return in_section(m_config, config_section(), key, {});
}

std::optional<AwsValue> AwsShared::sub(const std::string &key, const std::string &subkey) const {
  for (auto [f, s] :
       {std::pair{&m_credentials, credentials_section()}, std::pair{&m_config, config_section()}}) {
    if (!s) continue;
    auto it = s->values.find(key);
    if (it == s->values.end()) continue;
    auto sit = it->second.sub.find(subkey);
    if (sit != it->second.sub.end() && !sit->second.empty())
      return AwsValue{sit->second, label_of(*f, *s) + " " + key + "." + subkey};
    // `s3 = addressing_style = path` on one line: the one sub-setting written inline.
    const auto &v = it->second.value;
    auto eq = v.find('=');
    if (eq != std::string::npos && util::to_lower(util::trim(v.substr(0, eq))) == subkey)
      return AwsValue{util::trim(v.substr(eq + 1)), label_of(*f, *s) + " " + key + "." + subkey};
  }
  return std::nullopt;
}

std::optional<AwsValue> AwsShared::service(const std::string &service, const std::string &key) const {
  auto name = get("services");
  if (!name) return std::nullopt;
  const auto *s = m_config.find("services " + name->value);
  if (!s) return std::nullopt;
  auto it = s->values.find(service);
  if (it == s->values.end()) return std::nullopt;
  auto sit = it->second.sub.find(key);
  if (sit == it->second.sub.end() || sit->second.empty()) return std::nullopt;
  return AwsValue{sit->second, "file " + m_config.path + " [services " + name->value + "] " + service + "." +
                                   key + " (services = " + name->value + " in [" +
                                   (config_section() ? config_section()->name : m_profile) + "])"};
}

} // namespace lodge::aws
