#include <cerrno>
#include <cstring>
#include <fstream>
#include <lodge/error.hpp>
#include <lodge/s3/aws_config.hpp>
#include <lodge/util/strings.hpp>
#include <sstream>
#include <sys/stat.h>

namespace lodge::s3 {
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

} // namespace lodge::s3

namespace lodge::s3 {
namespace {
std::string env_value(const std::map<std::string, std::string> &env, const char *k) {
  auto it = env.find(k);
  return it == env.end() ? std::string{} : it->second;
}

// Static keys of one file's profile section: nullopt when it has none, an error when only
// one of the pair is there.
std::optional<Result<Credentials>> static_keys(const IniFile &f, const IniSection *s, ProviderStep &step) {
  if (!f.exists) {
    step.why = "no such file";
    return std::nullopt;
  }
  if (!s) {
    step.why = "no profile section for it";
    return std::nullopt;
  }
  auto id = AwsShared::in_section(f, s, "aws_access_key_id", {});
  auto secret = AwsShared::in_section(f, s, "aws_secret_access_key", {});
  std::string where = "[" + s->name + "] of " + f.path;
  if (!id && !secret) {
    step.why = "[" + s->name + "] has no aws_access_key_id";
    return std::nullopt;
  }
  if (!id || !secret) {
    step.why = "partial credentials";
    return Result<Credentials>(Error(
        Errc::config_invalid, std::string("partial credentials in ") + where + ": " +
                                  (id ? "aws_secret_access_key" : "aws_access_key_id") + " is missing"));
  }
  Credentials c;
  c.access_key_id = id->value;
  c.secret_access_key = secret->value;
  if (auto t = AwsShared::in_section(f, s, "aws_session_token", {})) c.session_token = t->value;
  c.source = "file " + f.path + " [" + s->name + "]";
  step.used = true;
  step.why = "static keys in [" + s->name + "]";
  return Result<Credentials>(c);
}

Error unsupported(const std::string &what) {
  return Error(Errc::config_invalid,
               what + ": lodge does not implement this credential provider yet; use static keys "
                      "(AWS_ACCESS_KEY_ID / AWS_SECRET_ACCESS_KEY or aws_access_key_id in the "
                      "profile) meanwhile");
}
} // namespace

CredentialChain resolve_credential_chain(const std::map<std::string, std::string> &env,
                                         const AwsShared &shared, const StsAccess *sts) {
  CredentialChain out;
  auto finish = [&](ProviderStep step, Result<Credentials> r) {
    out.steps.push_back(std::move(step));
    out.credentials = std::move(r);
    return out;
  };

  ProviderStep e{"environment", false, {}};
  auto id = env_value(env, "AWS_ACCESS_KEY_ID"), secret = env_value(env, "AWS_SECRET_ACCESS_KEY");
  if (!id.empty() && !secret.empty()) {
    Credentials c;
    c.access_key_id = id;
    c.secret_access_key = secret;
    c.session_token = env_value(env, "AWS_SESSION_TOKEN");
    c.source = "environment";
    e.used = true;
    e.why = "AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY set";
    return finish(e, c);
  }
  if (!id.empty() || !secret.empty()) {
    // The CLI's "Partial credentials found in env": never another identity instead.
    std::string missing = id.empty() ? "AWS_ACCESS_KEY_ID" : "AWS_SECRET_ACCESS_KEY";
    std::string set = id.empty() ? "AWS_SECRET_ACCESS_KEY" : "AWS_ACCESS_KEY_ID";
    e.why = "partial credentials: " + set + " set, " + missing + " not";
    return finish(e, Error(Errc::config_invalid, "partial credentials found in the environment: " + set +
                                                     " is set but " + missing + " is missing"));
  }
  e.why = "AWS_ACCESS_KEY_ID not set";
  out.steps.push_back(e);

  const auto *cs = shared.config_section();
  const auto &cfg = shared.config_file();
  std::string profile = "profile " + shared.profile();
  if (auto role = AwsShared::in_section(cfg, cs, "role_arn", {});
      role && !AwsShared::in_section(cfg, cs, "web_identity_token_file", {}))
    return finish({"assume role (role_arn)", false, "configured in " + role->source + ", not implemented"},
                  unsupported("role_arn in " + role->source));

  ProviderStep w{"web identity", false, {}};
  std::string token_file = env_value(env, "AWS_WEB_IDENTITY_TOKEN_FILE"),
              role = env_value(env, "AWS_ROLE_ARN");
  std::string named_by = "AWS_WEB_IDENTITY_TOKEN_FILE";
  if (token_file.empty()) {
    if (auto f = AwsShared::in_section(cfg, cs, "web_identity_token_file", {})) {
      token_file = f->value;
      named_by = "web_identity_token_file in " + f->source;
      role.clear();
      if (auto r = AwsShared::in_section(cfg, cs, "role_arn", {})) role = r->value;
    }
  }
  if (!token_file.empty()) {
    w.provider = "web identity (" + named_by + ")";
    if (role.empty())
      return finish(w, Error(Errc::config_invalid, named_by +
                                                       " is set but no role: set AWS_ROLE_ARN (or role_arn "
                                                       "beside web_identity_token_file in the profile)"));
    if (!sts)
      return finish(w, Error(Errc::config_invalid, named_by + ": no STS endpoint to exchange the token at"));
    std::ifstream tf(token_file, std::ios::binary);
    std::stringstream token;
    if (tf) token << tf.rdbuf();
    if (!tf || token.str().empty())
      return finish(w, Error(Errc::config_invalid,
                             token_file + " (" + named_by + "): cannot read the web identity token" +
                                 (tf ? ": it is empty" : std::string(": ") + std::strerror(errno))));
    std::string session = env_value(env, "AWS_ROLE_SESSION_NAME");
    if (session.empty())
      if (auto n = AwsShared::in_section(cfg, cs, "role_session_name", {})) session = n->value;
    if (session.empty()) session = "lodge";
    auto r = assume_role_with_web_identity(*sts, role, session, util::trim(token.str()));
    if (r) {
      w.used = true;
      w.why = "STS AssumeRoleWithWebIdentity for " + role + " at " + sts->endpoint;
    } else {
      w.why = "STS refused or failed";
    }
    return finish(w, r);
  }
  w.why = "AWS_WEB_IDENTITY_TOKEN_FILE not set";
  out.steps.push_back(w);

  if (auto sso = AwsShared::in_section(cfg, cs, "sso_session", {}))
    return finish({"SSO", false, "configured in " + sso->source + ", not implemented"},
                  unsupported("sso_session in " + sso->source));
  if (auto sso = AwsShared::in_section(cfg, cs, "sso_start_url", {}))
    return finish({"SSO", false, "configured in " + sso->source + ", not implemented"},
                  unsupported("sso_start_url in " + sso->source));

  const auto &credf = shared.credentials_file();
  ProviderStep sc{"shared credentials file " + credf.path + " [" + shared.profile() + "]", false, {}};
  if (auto r = static_keys(credf, shared.credentials_section(), sc)) return finish(sc, std::move(*r));
  out.steps.push_back(sc);

  if (auto proc = shared.get("credential_process"))
    return finish({"credential_process", false, "configured in " + proc->source + ", not implemented"},
                  unsupported("credential_process in " + proc->source));

  ProviderStep sf{"shared config file " + cfg.path + " [" + (cs ? cs->name : profile) + "]", false, {}};
  if (auto r = static_keys(cfg, cs, sf)) return finish(sf, std::move(*r));
  out.steps.push_back(sf);

  out.steps.push_back({"container credentials", false, "not implemented"});
  out.steps.push_back({"instance metadata (IMDS)", false, "not implemented"});
  out.credentials =
      Error(Errc::config_invalid, "no S3 credentials: set AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY, "
                                  "or aws_access_key_id / aws_secret_access_key in profile [" +
                                      shared.profile() + "] of " + credf.path + " or " + cfg.path +
                                      " (lodge config --explain shows each place looked at)");
  return out;
}

} // namespace lodge::s3
