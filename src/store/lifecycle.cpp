#include <iterator>
#include <lodge/store/lifecycle.hpp>
#include <lodge/util/strings.hpp>
#include <lodge/util/xml.hpp>
#include <nlohmann/json.hpp>
#include <optional>
#include <pugixml.hpp>
#include <sstream>

namespace lodge::store::lifecycle {
namespace {

constexpr const char *k_s3_namespace = "http://s3.amazonaws.com/doc/2006-03-01/";
// PutBucketLifecycleConfiguration takes at most 1000 rules.
constexpr size_t k_s3_max_rules = 1000;

// Parsed without DOCTYPE processing (util::load_xml), so no entity of a hostile answer is
// ever expanded; anything but a LifecycleConfiguration is refused.
std::optional<pugi::xml_document> load(std::string_view xml) {
  auto doc = util::load_xml(xml);
  if (!doc || std::string_view(doc->document_element().name()) != "LifecycleConfiguration")
    return std::nullopt;
  return doc;
}
Error unreadable(std::string_view why) {
  return Error(Errc::storage_error,
               "the bucket's lifecycle configuration cannot be read (" + std::string(why) +
                   "); lodge will not replace a configuration it cannot keep the other rules of");
}

bool ours(const pugi::xml_node &rule) {
  return util::trim(rule.child("ID").text().as_string()).rfind(k_rule_prefix, 0) == 0;
}

void text_child(pugi::xml_node parent, const char *name, const std::string &value) {
  parent.append_child(name).text().set(value.c_str());
}

pugi::xml_node begin_rule(pugi::xml_node root, const char *id) {
  auto rule = root.append_child("Rule");
  text_child(rule, "ID", id);
  return rule;
}

void prefix_filter(pugi::xml_node rule, const std::string &prefix) {
  text_child(rule.append_child("Filter"), "Prefix", prefix);
}

} // namespace

Result<std::string> s3_configuration(const S3Rules &rules, std::string_view existing) {
  pugi::xml_document out;
  auto decl = out.append_child(pugi::node_declaration);
  decl.append_attribute("version") = "1.0";
  decl.append_attribute("encoding") = "UTF-8";
  auto root = out.append_child("LifecycleConfiguration");
  root.append_attribute("xmlns") = k_s3_namespace;

  // PutBucketLifecycleConfiguration replaces the whole configuration: everything that is
  // not lodge's is carried over as the server gave it, in its order.
  if (!util::trim(existing).empty()) {
    auto doc = load(existing);
    if (!doc) return unreadable("not a LifecycleConfiguration document, or one with a DOCTYPE");
    for (auto n : doc->document_element().children()) {
      if (n.type() != pugi::node_element) continue;
      if (std::string_view(n.name()) == "Rule" && ours(n)) continue;
      root.append_copy(n);
    }
  }

  const std::string days = std::to_string(rules.days);
  {
    auto rule = begin_rule(root, "lodge-abort-incomplete-uploads");
    prefix_filter(rule, rules.prefix);
    text_child(rule, "Status", "Enabled");
    text_child(rule.append_child("AbortIncompleteMultipartUpload"), "DaysAfterInitiation", days);
  }
  if (rules.tag_state) {
    // S3 refuses an And with one predicate, so at the bucket root the tag is the filter.
    auto rule = begin_rule(root, "lodge-expire-pending");
    auto filter = rule.append_child("Filter");
    auto where = rules.prefix.empty() ? filter : filter.append_child("And");
    if (!rules.prefix.empty()) text_child(where, "Prefix", rules.prefix);
    auto tag = where.append_child("Tag");
    text_child(tag, "Key", std::string(k_s3_state_tag));
    text_child(tag, "Value", "pending");
    text_child(rule, "Status", "Enabled");
    text_child(rule.append_child("Expiration"), "Days", days);
  }
  if (rules.versioned) {
    // On a versioned bucket an expiration only hides the object behind a delete marker:
    // this takes the version itself (and the marker left alone) N days later.
    auto rule = begin_rule(root, std::string(k_s3_noncurrent_rule).c_str());
    prefix_filter(rule, rules.prefix);
    text_child(rule, "Status", "Enabled");
    text_child(rule.append_child("Expiration"), "ExpiredObjectDeleteMarker", "true");
    text_child(rule.append_child("NoncurrentVersionExpiration"), "NoncurrentDays", days);
  }

  auto count = static_cast<size_t>(std::distance(root.children("Rule").begin(), root.children("Rule").end()));
  if (count > k_s3_max_rules)
    return Error(Errc::storage_error, "the bucket's lifecycle configuration would have " +
                                          std::to_string(count) + " rules with lodge's; S3 allows " +
                                          std::to_string(k_s3_max_rules));
  std::ostringstream s;
  out.save(s, "  ", pugi::format_default, pugi::encoding_utf8);
  return s.str();
}

Result<std::vector<std::string>> s3_rule_ids(std::string_view xml) {
  auto doc = load(xml);
  if (!doc) return unreadable("not a LifecycleConfiguration document, or one with a DOCTYPE");
  std::vector<std::string> ids;
  for (auto rule : doc->document_element().children("Rule"))
    ids.push_back(util::trim(rule.child("ID").text().as_string()));
  return ids;
}

std::string azure_management_policy(const std::string &container, const std::string &prefix, int days) {
  // A prefixMatch starts with the container's name; "container/" matches all of it.
  std::string match = container + "/" + prefix;
  if (match.back() != '/') match += '/';
  nlohmann::json filters = {{"blobTypes", {"blockBlob"}},
                            {"prefixMatch", {match}},
                            {"blobIndexMatch", {{{"name", "state"}, {"op", "=="}, {"value", "pending"}}}}};
  nlohmann::json rule = {
      {"enabled", true},
      {"name", std::string(k_rule_prefix) + "pending-backstop"},
      {"type", "Lifecycle"},
      {"definition",
       {{"actions", {{"baseBlob", {{"delete", {{"daysAfterModificationGreaterThan", days}}}}}}},
        {"filters", filters}}}};
  return nlohmann::json{{"rules", {rule}}}.dump(2);
}

std::string azure_apply_hint(const std::string &account) {
  std::string name = account.empty() ? "ACCOUNT" : account;
  return "save the policy as lodge-policy.json and run: az storage account management-policy create "
         "--account-name " +
         name +
         " --resource-group RESOURCE_GROUP --policy @lodge-policy.json (this replaces the account's whole "
         "policy: when `az storage account management-policy show` lists other rules, add this one to "
         "them). A management-plane call: a storage key or SAS cannot make it, so lodge does not.";
}

} // namespace lodge::store::lifecycle
