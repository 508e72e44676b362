#include "stores.hpp"

#include <array>
#include <initializer_list>
#include <lodge/error.hpp>
#include <lodge/util/log.hpp>
#include <nlohmann/json.hpp>

namespace lodge::store {
namespace {

struct Layer {
  const char *key;
  std::initializer_list<const char *> env; // the first one set wins
  const char *fallback;
};

// The environment variables that set lodge's store keys (docs/stores.md, lodge(1) ENVIRONMENT).
// AWS_ENDPOINT_URL(_S3) name an S3 endpoint: S3 reads them itself (s3/settings.cpp).
const std::array<Layer, 5> k_layers{{
    {"endpoint", {"LODGE_ENDPOINT"}, ""},
    {"region", {"LODGE_REGION", "AWS_REGION", "AWS_DEFAULT_REGION"}, "us-east-1"},
    {"ca_bundle", {"LODGE_CA_BUNDLE", "AWS_CA_BUNDLE"}, ""},
    {"profile", {"AWS_PROFILE", "AWS_DEFAULT_PROFILE"}, ""},
    {"tag_state", {}, "false"},
}};

class CommonConfig final : public StoreConfig {
public:
  explicit CommonConfig(Settings layered) : m_s(std::move(layered)) {
    // As parse_s3_settings refuses one for S3: a password in the endpoint would be printed
    // wherever the endpoint is (config, store errors) and recorded in the ledger's binding.
    const auto &e = m_s.at("endpoint");
    if (util::log::url_has_userinfo(e.value))
      throw LodgeError(Errc::config_invalid, "endpoint (" + e.source +
                                                 "): user information (user:password@ before the host) is "
                                                 "refused in an endpoint URL");
  }
  [[nodiscard]] const std::string &endpoint() const override { return m_s.at("endpoint").value; }
  [[nodiscard]] const std::string &ca_bundle() const override { return m_s.at("ca_bundle").value; }
  void to_json(nlohmann::json &out) const override {
    for (const char *k : {"endpoint", "region", "ca_bundle", "profile"})
      out[k] = m_s.at(k).value;
    out["tag_state"] = m_s.at("tag_state").value == "true";
  }

private:
  Settings m_s;
};
} // namespace

Settings layer_settings(const Settings &given, const std::map<std::string, std::string> &env) {
  Settings out = given;
  for (const auto &l : k_layers) {
    auto it = given.find(l.key);
    const bool flag = it != given.end() && it->second.source.rfind("file ", 0) != 0;
    if (flag) continue;
    bool from_env = false;
    for (const char *n : l.env) {
      auto e = env.find(n);
      if (e != env.end() && !e->second.empty()) {
        out[l.key] = {e->second, std::string("env ") + n};
        from_env = true;
        break;
      }
    }
    if (!from_env && it == given.end()) out[l.key] = {l.fallback, "default"};
  }
  return out;
}

std::shared_ptr<const StoreConfig> common_config(const Settings &given,
                                                 const std::map<std::string, std::string> &env) {
  return std::make_shared<CommonConfig>(layer_settings(given, env));
}

} // namespace lodge::store
