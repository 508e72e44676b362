#include <algorithm>
#include <cerrno>
#include <charconv>
#include <cstring>
#include <fstream>
#include <lodge/aws/credential_chain.hpp>
#include <lodge/util/clock.hpp>
#include <lodge/util/strings.hpp>
#include <nlohmann/json.hpp>
#include <sstream>

namespace lodge::aws {
namespace {
std::string env_value(const Env &env, const char *k) {
  auto it = env.find(k);
  return it == env.end() ? std::string{} : it->second;
}

bool is_true(const std::string &v) {
  return util::to_lower(util::trim(v)) == "true";
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

// The profile's static keys, the credentials file first (a role's source profile).
std::optional<Result<Credentials>> profile_static_keys(const AwsShared &p) {
  ProviderStep ignored;
  if (auto r = static_keys(p.credentials_file(), p.credentials_section(), ignored)) return r;
  return static_keys(p.config_file(), p.config_section(), ignored);
}

Error unsupported(const std::string &what) {
  return Error(Errc::config_invalid,
               what + ": lodge does not implement this credential provider; use another (lodge "
                      "config --explain lists them)");
}

// A setting of `p` as an integer within [lo, hi], or an error naming it.
Result<int64_t> int_setting(const AwsValue &v, const std::string &key, int64_t lo, int64_t hi) {
  int64_t n = 0;
  const auto &s = v.value;
  auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), n);
  if (ec != std::errc{} || end != s.data() + s.size() || n < lo || n > hi)
    return Error(Errc::config_invalid, key + " in " + v.source + ": expected a whole number from " +
                                           std::to_string(lo) + " to " + std::to_string(hi) + ", got '" +
                                           util::escape_for_terminal(s) + "'");
  return n;
}

// http[s]://host[:port]/path split into its scheme and host (brackets kept for IPv6).
struct UrlParts {
  std::string scheme, host;
};
std::optional<UrlParts> split_url(const std::string &url) {
  auto s = url.find("://");
  if (s == std::string::npos) return std::nullopt;
  UrlParts u;
  u.scheme = util::to_lower(url.substr(0, s));
  auto rest = url.substr(s + 3);
  rest = rest.substr(0, rest.find_first_of("/?#"));
  if (auto at = rest.rfind('@'); at != std::string::npos) rest = rest.substr(at + 1);
  if (!rest.empty() && rest[0] == '[') {
    auto close = rest.find(']');
    if (close == std::string::npos) return std::nullopt;
    u.host = rest.substr(0, close + 1);
  } else {
    u.host = rest.substr(0, rest.find(':'));
  }
  u.host = util::to_lower(u.host);
  if (u.host.empty() || (u.scheme != "http" && u.scheme != "https")) return std::nullopt;
  return u;
}

bool is_loopback(const std::string &host) {
  return host == "localhost" || host == "[::1]" || host.rfind("127.", 0) == 0;
}

// One GET or PUT to a metadata service, retried on network failures and 5xx.
Result<http::Response> metadata_call(http::Transport &t, const std::string &method, const std::string &url,
                                     const http::Headers &headers, int attempts) {
  Result<http::Response> last = Error(Errc::storage_unavailable, "not asked");
  for (int i = 0; i < std::max(attempts, 1); ++i) {
    http::StringBody empty("");
    http::Request req;
    req.method = method;
    req.url = url;
    req.headers = headers;
    if (method == "PUT") req.body = &empty;
    last = t.perform(req);
    if (last && last->status < 500) return last;
  }
  return last;
}

std::string status_text(const Result<http::Response> &r) {
  return r ? "HTTP " + std::to_string(r->status) : r.error().message;
}

class Walk {
public:
  Walk(const Env &env, const AwsShared &shared, const ChainAccess *access)
      : m_env(env), m_shared(shared), m_access(access) {}

  CredentialChain run();

private:
  using Answer = std::optional<Result<Credentials>>; // nullopt: not configured, ask the next

  Answer environment(ProviderStep &step) const;
  Answer profile_role(ProviderStep &step) const;
  Answer web_identity(ProviderStep &step) const;
  Answer sso(ProviderStep &step) const;
  Answer credentials_file(ProviderStep &step) const;
  Answer credential_process(ProviderStep &step) const;
  Answer config_file(ProviderStep &step) const;
  Answer container(ProviderStep &step) const;
  Answer instance_metadata(ProviderStep &step) const;

  [[nodiscard]] Result<Credentials> exchange_web_token(const std::string &token_file,
                                                       const std::string &named_by, const std::string &role,
                                                       const std::string &session, ProviderStep &step) const;
  [[nodiscard]] Result<Credentials> assume_from_profile(const AwsShared &p, std::vector<std::string> path,
                                                        std::string &how) const;
  [[nodiscard]] Result<Credentials>
  source_credentials(const AwsShared &p, const std::vector<std::string> &path, std::string &how) const;
  // nullopt: the service is not configured (container) or not reachable (instance metadata).
  [[nodiscard]] Answer fetch_container(ProviderStep &step) const;
  [[nodiscard]] Answer fetch_instance_metadata(const AwsShared &p, ProviderStep &step) const;
  // The profile was chosen by lodge's --profile flag (the CLI's --profile).
  [[nodiscard]] bool env_skipped() const { return m_shared.profile_source().rfind("flag ", 0) == 0; }
  [[nodiscard]] int64_t now_ms() const {
    return m_access && m_access->now_ms ? m_access->now_ms() : util::system_clock().now_ms();
  }

  const Env &m_env;
  const AwsShared &m_shared;
  const ChainAccess *m_access;
};

CredentialChain Walk::run() {
  CredentialChain out;
  using Provider = Answer (Walk::*)(ProviderStep &) const;
  for (Provider p :
       {&Walk::environment, &Walk::profile_role, &Walk::web_identity, &Walk::sso, &Walk::credentials_file,
        &Walk::credential_process, &Walk::config_file, &Walk::container, &Walk::instance_metadata}) {
    ProviderStep step;
    auto answer = (this->*p)(step);
    if (!step.provider.empty()) out.steps.push_back(step); // a silent provider is not configured
    if (answer) {
      out.credentials = std::move(*answer);
      return out;
    }
  }
  const auto &cfg = m_shared.config_file();
  const auto &credf = m_shared.credentials_file();
  out.credentials =
      Error(Errc::config_invalid, "no S3 credentials: set AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY, "
                                  "or aws_access_key_id / aws_secret_access_key in profile [" +
                                      m_shared.profile() + "] of " + credf.path + " or " + cfg.path +
                                      (env_skipped() && !env_value(m_env, "AWS_ACCESS_KEY_ID").empty()
                                           ? "; AWS_ACCESS_KEY_ID is set, but --profile takes the profile's "
                                             "credentials over the environment's, as aws --profile does"
                                           : "") +
                                      " (lodge config --explain shows each place looked at)");
  return out;
}

Walk::Answer Walk::environment(ProviderStep &step) const {
  auto &e = step;
  e.provider = "environment";
  auto id = env_value(m_env, "AWS_ACCESS_KEY_ID"), secret = env_value(m_env, "AWS_SECRET_ACCESS_KEY");
  if (!id.empty() && !secret.empty() && !env_skipped()) {
    Credentials c;
    c.access_key_id = id;
    c.secret_access_key = secret;
    c.session_token = env_value(m_env, "AWS_SESSION_TOKEN");
    c.source = "environment";
    e.used = true;
    e.why = "AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY set";
    return Result<Credentials>(c);
  }
  if ((!id.empty() || !secret.empty()) && env_skipped()) {
    // `aws --profile P` takes P's credentials over the environment's keys: botocore drops
    // its environment provider when the profile is chosen on the command line.
    e.why = "skipped: --profile chooses the profile's credentials over the environment's, as aws --profile";
    return std::nullopt;
  }
  if (!id.empty() || !secret.empty()) {
    // The CLI's "Partial credentials found in env": never another identity instead.
    std::string missing = id.empty() ? "AWS_ACCESS_KEY_ID" : "AWS_SECRET_ACCESS_KEY";
    std::string set = id.empty() ? "AWS_SECRET_ACCESS_KEY" : "AWS_ACCESS_KEY_ID";
    e.why = "partial credentials: " + set + " set, " + missing + " not";
    return Result<Credentials>(
        Error(Errc::config_invalid, "partial credentials found in the environment: " + set + " is set but " +
                                        missing + " is missing"));
  }
  e.why = "AWS_ACCESS_KEY_ID not set";
  return std::nullopt;
}

Walk::Answer Walk::profile_role(ProviderStep &step) const {
  auto role = m_shared.get("role_arn");
  if (!role || m_shared.get("web_identity_token_file")) return std::nullopt; // the web identity provider's
  step.provider = "assume role (role_arn in " + role->source + ")";
  std::string how;
  auto r = assume_from_profile(m_shared, {}, how);
  step.used = r.ok();
  step.why = r ? how : "failed";
  return r;
}

Result<Credentials> Walk::assume_from_profile(const AwsShared &p, std::vector<std::string> path,
                                              std::string &how) const {
  auto role = p.get("role_arn");
  std::string where = "role_arn in " + role->source;
  path.push_back(p.profile());
  if (auto token = p.get("web_identity_token_file")) {
    ProviderStep ignored;
    std::string session = p.get("role_session_name") ? p.get("role_session_name")->value : "lodge";
    how = "web identity of [" + p.profile() + "]";
    return exchange_web_token(token->value, "web_identity_token_file in " + token->source, role->value,
                              session, ignored);
  }
  auto source_profile = p.get("source_profile");
  auto credential_source = p.get("credential_source");
  if (source_profile && credential_source)
    return Error(Errc::config_invalid,
                 where + ": source_profile and credential_source are both set; keep one");
  if (!source_profile && !credential_source)
    return Error(Errc::config_invalid,
                 where + ": it needs source_profile, credential_source or "
                         "web_identity_token_file to say whose credentials assume the role");
  if (auto mfa = p.get("mfa_serial"))
    return Error(Errc::config_invalid,
                 where + ": mfa_serial (" + mfa->source +
                     ") needs a code typed at a terminal, which lodge, run unattended, never asks for; "
                     "use a role without MFA or credentials from credential_process");
  Result<Credentials> source = Error(Errc::config_invalid, "unset");
  std::string source_how;
  if (source_profile) {
    const auto &name = source_profile->value;
    if (name == p.profile()) {
      // A profile naming itself: its own static keys assume its role (the CLI's rule).
      auto keys = profile_static_keys(p);
      if (!keys)
        return Error(Errc::config_invalid,
                     where + ": source_profile names [" + name +
                         "] itself, which has no aws_access_key_id / aws_secret_access_key");
      source = std::move(*keys);
      source_how = "static keys of [" + name + "]";
    } else if (std::find(path.begin(), path.end(), name) != path.end()) {
      std::string cycle;
      for (const auto &x : path)
        cycle += x + " -> ";
      return Error(Errc::config_invalid, where + ": source_profile makes a cycle: " + cycle + name);
    } else if (path.size() >= 10) {
      return Error(Errc::config_invalid, where + ": more than 10 roles chained through source_profile");
    } else {
      auto next = p.for_profile(name);
      if (!next.has_profile())
        return Error(Errc::config_invalid, "source_profile in " + source_profile->source + ": the profile (" +
                                               name + ") could not be found in " + p.config_file().path +
                                               " or " + p.credentials_file().path);
      source = source_credentials(next, path, source_how);
    }
  } else {
    const auto &kind = credential_source->value;
    ProviderStep sub;
    if (kind == "Environment") {
      auto a = environment(sub);
      source = a ? std::move(*a)
                 : Result<Credentials>(Error(Errc::config_invalid, "credential_source = Environment in " +
                                                                       credential_source->source +
                                                                       ": AWS_ACCESS_KEY_ID is not set"));
    } else if (kind == "EcsContainer") {
      auto a = fetch_container(sub);
      source =
          a ? std::move(*a)
            : Result<Credentials>(Error(Errc::config_invalid,
                                        "credential_source = EcsContainer in " + credential_source->source +
                                            ": neither AWS_CONTAINER_CREDENTIALS_RELATIVE_URI nor "
                                            "AWS_CONTAINER_CREDENTIALS_FULL_URI is set"));
    } else if (kind == "Ec2InstanceMetadata") {
      auto a = fetch_instance_metadata(p, sub);
      source = a ? std::move(*a)
                 : Result<Credentials>(
                       Error(Errc::config_invalid, "credential_source = Ec2InstanceMetadata in " +
                                                       credential_source->source + ": " + sub.why));
    } else {
      return Error(Errc::config_invalid,
                   "credential_source in " + credential_source->source + ": '" +
                       util::escape_for_terminal(kind) +
                       "' is not one of Environment, Ec2InstanceMetadata, EcsContainer");
    }
    source_how = credential_source->value;
  }
  if (!source) return source.error();

  AssumeRoleInput in;
  in.role_arn = role->value;
  if (auto d = p.get("duration_seconds")) {
    auto n = int_setting(*d, "duration_seconds", 900, 43'200);
    if (!n) return n.error();
    in.duration_seconds = static_cast<int>(n.value());
  }
  if (auto x = p.get("external_id")) in.external_id = x->value;
  in.session_name = p.get("role_session_name") ? p.get("role_session_name")->value
                                               : "lodge-" + std::to_string(now_ms() / 1000);
  if (!m_access) return Error(Errc::config_invalid, where + ": no STS endpoint to assume the role at");
  auto r = assume_role(*m_access, source.value(), in);
  if (r) how = "STS AssumeRole for " + role->value + " at " + m_access->sts_endpoint + ", as " + source_how;
  return r;
}

Result<Credentials> Walk::source_credentials(const AwsShared &p, const std::vector<std::string> &path,
                                             std::string &how) const {
  std::string name = "[" + p.profile() + "]";
  if (p.get("role_arn")) {
    std::string inner;
    auto r = assume_from_profile(p, path, inner);
    how = "role of " + name + " (" + inner + ")";
    return r;
  }
  if (auto keys = profile_static_keys(p)) {
    how = "static keys of " + name;
    return std::move(*keys);
  }
  if (auto proc = p.get("credential_process")) {
    how = "credential_process of " + name;
    return run_credential_process(proc->value, "credential_process in " + proc->source);
  }
  return Error(Errc::config_invalid, "source_profile " + name +
                                         " has no credentials: no aws_access_key_id, role_arn or "
                                         "credential_process in " +
                                         p.config_file().path + " or " + p.credentials_file().path);
}

Result<Credentials> Walk::exchange_web_token(const std::string &token_file, const std::string &named_by,
                                             const std::string &role, const std::string &session,
                                             ProviderStep &step) const {
  if (role.empty())
    return Error(Errc::config_invalid, named_by + " is set but no role: set AWS_ROLE_ARN (or role_arn "
                                                  "beside web_identity_token_file in the profile)");
  if (!m_access) return Error(Errc::config_invalid, named_by + ": no STS endpoint to exchange the token at");
  std::ifstream tf(token_file, std::ios::binary);
  std::stringstream token;
  if (tf) token << tf.rdbuf();
  if (!tf || token.str().empty())
    return Error(Errc::config_invalid, token_file + " (" + named_by +
                                           "): cannot read the web identity token" +
                                           (tf ? ": it is empty" : std::string(": ") + std::strerror(errno)));
  auto r = assume_role_with_web_identity(*m_access, role, session, util::trim(token.str()));
  if (r) {
    step.used = true;
    step.why = "STS AssumeRoleWithWebIdentity for " + role + " at " + m_access->sts_endpoint;
  } else {
    step.why = "STS refused or failed";
  }
  return r;
}

Walk::Answer Walk::web_identity(ProviderStep &step) const {
  auto &w = step;
  w.provider = "web identity";
  const auto &cfg = m_shared.config_file();
  const auto *cs = m_shared.config_section();
  std::string token_file = env_value(m_env, "AWS_WEB_IDENTITY_TOKEN_FILE"),
              role = env_value(m_env, "AWS_ROLE_ARN");
  std::string named_by = "AWS_WEB_IDENTITY_TOKEN_FILE";
  if (token_file.empty()) {
    if (auto f = AwsShared::in_section(cfg, cs, "web_identity_token_file", {})) {
      token_file = f->value;
      named_by = "web_identity_token_file in " + f->source;
      role.clear();
      if (auto r = AwsShared::in_section(cfg, cs, "role_arn", {})) role = r->value;
    }
  }
  if (token_file.empty()) {
    w.why = "AWS_WEB_IDENTITY_TOKEN_FILE not set";
    return std::nullopt;
  }
  w.provider = "web identity (" + named_by + ")";
  std::string session = env_value(m_env, "AWS_ROLE_SESSION_NAME");
  if (session.empty())
    if (auto n = AwsShared::in_section(cfg, cs, "role_session_name", {})) session = n->value;
  if (session.empty()) session = "lodge";
  return exchange_web_token(token_file, named_by, role, session, w);
}

Walk::Answer Walk::sso(ProviderStep &step) const {
  for (const char *key : {"sso_session", "sso_start_url"})
    if (auto sso = AwsShared::in_section(m_shared.config_file(), m_shared.config_section(), key, {})) {
      step = {"SSO", false, "configured in " + sso->source + ", not implemented"};
      return Result<Credentials>(unsupported(std::string(key) + " in " + sso->source));
    }
  return std::nullopt;
}

Walk::Answer Walk::credentials_file(ProviderStep &step) const {
  auto &sc = step;
  const auto &credf = m_shared.credentials_file();
  sc.provider = "shared credentials file " + credf.path + " [" + m_shared.profile() + "]";
  return static_keys(credf, m_shared.credentials_section(), sc);
}

Walk::Answer Walk::credential_process(ProviderStep &step) const {
  auto proc = m_shared.get("credential_process");
  if (!proc) return std::nullopt;
  step.provider = "credential_process (" + proc->source + ")";
  auto r = run_credential_process(proc->value, "credential_process in " + proc->source);
  step.used = r.ok();
  step.why = r ? "the program printed credentials" +
                     std::string(r->expires_ms ? " (temporary: renewed before they expire)" : "")
               : "the program failed";
  return r;
}

Walk::Answer Walk::config_file(ProviderStep &step) const {
  auto &sf = step;
  const auto &cfg = m_shared.config_file();
  const auto *cs = m_shared.config_section();
  sf.provider =
      "shared config file " + cfg.path + " [" + (cs ? cs->name : "profile " + m_shared.profile()) + "]";
  return static_keys(cfg, cs, sf);
}

Walk::Answer Walk::container(ProviderStep &step) const {
  step.provider = "container credentials";
  return fetch_container(step);
}

Walk::Answer Walk::fetch_container(ProviderStep &step) const {
  // https://docs.aws.amazon.com/sdkref/latest/guide/feature-container-credentials.html
  auto relative = env_value(m_env, "AWS_CONTAINER_CREDENTIALS_RELATIVE_URI");
  auto full = env_value(m_env, "AWS_CONTAINER_CREDENTIALS_FULL_URI");
  std::string url, named_by;
  if (!relative.empty()) {
    named_by = "AWS_CONTAINER_CREDENTIALS_RELATIVE_URI";
    if (relative[0] != '/')
      return Result<Credentials>(
          Error(Errc::config_invalid, named_by + ": expected a path starting with '/'"));
    url = "http://169.254.170.2" + relative;
  } else if (!full.empty()) {
    named_by = "AWS_CONTAINER_CREDENTIALS_FULL_URI";
    auto u = split_url(full);
    if (!u) return Result<Credentials>(Error(Errc::config_invalid, named_by + ": expected an http(s) URL"));
    // Plain http only to the container agents and loopback: the answer is a secret.
    static const std::vector<std::string> agents{"169.254.170.2", "169.254.170.23", "[fd00:ec2::23]"};
    if (u->scheme == "http" && !is_loopback(u->host) &&
        std::find(agents.begin(), agents.end(), u->host) == agents.end())
      return Result<Credentials>(Error(
          Errc::config_invalid, named_by + ": plain http to " + u->host +
                                    " is refused; use https, a loopback address, or the ECS/EKS agent"));
    url = full;
  } else {
    step.why = "AWS_CONTAINER_CREDENTIALS_RELATIVE_URI and _FULL_URI not set";
    return std::nullopt;
  }
  step.provider = "container credentials (" + named_by + ")";
  http::Headers headers{{"accept", "application/json"}};
  std::string token = env_value(m_env, "AWS_CONTAINER_AUTHORIZATION_TOKEN");
  if (auto file = env_value(m_env, "AWS_CONTAINER_AUTHORIZATION_TOKEN_FILE"); !file.empty()) {
    std::ifstream in(file, std::ios::binary);
    std::stringstream ss;
    if (in) ss << in.rdbuf();
    if (!in)
      return Result<Credentials>(
          Error(Errc::config_invalid, file +
                                          " (AWS_CONTAINER_AUTHORIZATION_TOKEN_FILE): cannot "
                                          "read it: " +
                                          std::strerror(errno)));
    token = util::trim(ss.str());
  }
  if (token.find_first_of("\r\n") != std::string::npos)
    return Result<Credentials>(
        Error(Errc::config_invalid, "the container authorization token holds a line break; refused"));
  if (!token.empty()) headers.emplace_back("authorization", token);
  if (!m_access || !m_access->metadata_transport) {
    step.why = "no transport to reach it";
    return std::nullopt;
  }
  auto t = m_access->metadata_transport(2'000);
  auto r = metadata_call(*t, "GET", url, headers, 3);
  std::string what = "container credentials at " + url;
  if (!r || r->status != 200) {
    step.why = "failed: " + status_text(r);
    return Result<Credentials>(
        Error(r ? (r->status == 401 || r->status == 403 ? Errc::access_denied : Errc::storage_error)
                : r.error().code,
              what + " (" + named_by + "): " + status_text(r)));
  }
  auto c = parse_credentials_json(r->body, what);
  if (c) {
    c->source = "container credentials (" + url + ")";
    step.used = true;
    step.why = "answered at " + url;
  } else {
    step.why = "a bad answer";
  }
  return c;
}

Walk::Answer Walk::instance_metadata(ProviderStep &step) const {
  step.provider = "instance metadata (IMDS)";
  auto a = fetch_instance_metadata(m_shared, step);
  // As the SDKs: a service that fails or answers no (a proxy's 403 off EC2) is no
  // credentials from it; only a setting lodge cannot use is an error.
  if (a && !a->ok() && a->error().code != Errc::config_invalid) {
    step.why = "failed: " + a->error().message;
    return std::nullopt;
  }
  return a;
}

Walk::Answer Walk::fetch_instance_metadata(const AwsShared &p, ProviderStep &step) const {
  // https://docs.aws.amazon.com/AWSEC2/latest/UserGuide/configuring-instance-metadata-service.html
  auto setting = [&](const char *env, const char *key) {
    auto v = env_value(m_env, env);
    if (!v.empty()) return AwsValue{v, std::string("env ") + env};
    auto f = p.get(key);
    return f ? *f : AwsValue{};
  };
  if (is_true(setting("AWS_EC2_METADATA_DISABLED", "").value)) {
    step.why = "disabled by AWS_EC2_METADATA_DISABLED";
    return std::nullopt;
  }
  auto endpoint = setting("AWS_EC2_METADATA_SERVICE_ENDPOINT", "ec2_metadata_service_endpoint").value;
  if (endpoint.empty()) {
    auto mode = setting("AWS_EC2_METADATA_SERVICE_ENDPOINT_MODE", "ec2_metadata_service_endpoint_mode");
    endpoint = util::to_lower(mode.value) == "ipv6" ? "http://[fd00:ec2::254]" : "http://169.254.169.254";
  }
  while (!endpoint.empty() && endpoint.back() == '/')
    endpoint.pop_back();
  int64_t timeout_s = 1, attempts = 1;
  if (auto t = setting("AWS_METADATA_SERVICE_TIMEOUT", "metadata_service_timeout"); !t.value.empty()) {
    auto n = int_setting(t, "metadata_service_timeout", 1, 60);
    if (!n) return Result<Credentials>(n.error());
    timeout_s = n.value();
  }
  if (auto a = setting("AWS_METADATA_SERVICE_NUM_ATTEMPTS", "metadata_service_num_attempts");
      !a.value.empty()) {
    auto n = int_setting(a, "metadata_service_num_attempts", 1, 10);
    if (!n) return Result<Credentials>(n.error());
    attempts = n.value();
  }
  bool v1_disabled = is_true(setting("AWS_EC2_METADATA_V1_DISABLED", "ec2_metadata_v1_disabled").value);
  if (!m_access || !m_access->metadata_transport) {
    step.why = "no transport to reach it";
    return std::nullopt;
  }
  auto t = m_access->metadata_transport(timeout_s * 1000);
  auto attempts_i = static_cast<int>(attempts);

  // IMDSv2: a session token first; IMDSv1 only when the service does not know the call.
  auto tok = metadata_call(*t, "PUT", endpoint + "/latest/api/token",
                           {{"x-aws-ec2-metadata-token-ttl-seconds", "21600"}}, attempts_i);
  if (!tok) {
    step.why = "not reachable at " + endpoint + " (" + tok.error().message + ")";
    return std::nullopt;
  }
  http::Headers headers;
  if (tok->status == 200 && !tok->body.empty()) {
    headers.emplace_back("x-aws-ec2-metadata-token", util::trim(tok->body));
  } else if (tok->status == 400 || v1_disabled ||
             (tok->status != 403 && tok->status != 404 && tok->status != 405)) {
    step.why = "no session token from " + endpoint + " (" + status_text(tok) + ")";
    return Result<Credentials>(
        Error(Errc::storage_error,
              "instance metadata at " + endpoint + ": the IMDSv2 token request failed: " + status_text(tok)));
  }
  std::string base = endpoint + "/latest/meta-data/iam/security-credentials/";
  auto role = metadata_call(*t, "GET", base, headers, attempts_i);
  if (role && role->status == 404) {
    step.why = "the instance has no IAM role";
    return std::nullopt;
  }
  if (!role || role->status != 200 || util::trim(role->body).empty()) {
    step.why = "failed: " + status_text(role);
    return Result<Credentials>(Error(role ? Errc::storage_error : role.error().code,
                                     "instance metadata at " + base + ": " + status_text(role)));
  }
  auto name = util::trim(role->body);
  name = name.substr(0, name.find('\n'));
  auto creds = metadata_call(*t, "GET", base + name, headers, attempts_i);
  std::string what = "instance metadata credentials of role " + util::escape_for_terminal(name);
  if (!creds || creds->status != 200) {
    step.why = "failed: " + status_text(creds);
    return Result<Credentials>(Error(creds ? Errc::storage_error : creds.error().code,
                                     what + " at " + endpoint + ": " + status_text(creds)));
  }
  auto c = parse_credentials_json(creds->body, what);
  if (auto code = nlohmann::json::parse(creds->body, nullptr, false);
      c && code.is_object() && code.contains("Code") && code["Code"] != "Success")
    c = Error(Errc::storage_error,
              what + ": the service answered Code " + util::escape_for_terminal(code["Code"].dump()));
  if (c) {
    c->source = "instance metadata (role " + name + ")";
    step.used = true;
    step.why = "role " + name + " at " + endpoint + (headers.empty() ? " (IMDSv1)" : " (IMDSv2)");
  } else {
    step.why = "a bad answer";
  }
  return c;
}
} // namespace

CredentialChain resolve_credential_chain(const Env &env, const AwsShared &shared, const ChainAccess *access) {
  return Walk(env, shared, access).run();
}

} // namespace lodge::aws
