#include "support.hpp"

#include <lodge/store/lifecycle.hpp>
#include <lodge/store/store.hpp>
#include <nlohmann/json.hpp>
#include <pugixml.hpp>

using namespace lodge;
namespace lc = store::lifecycle;

namespace {
std::string data(const std::string &name) {
  return test::read_file(std::string(LODGE_TEST_DATA) + "/s3/" + name);
}

pugi::xml_node rule_by_id(const pugi::xml_document &doc, const std::string &id) {
  for (auto r : doc.document_element().children("Rule"))
    if (std::string(r.child("ID").text().as_string()) == id) return r;
  return {};
}

std::string at(pugi::xml_node n, const char *path) {
  return n.first_element_by_path(path).text().as_string();
}
} // namespace

TEST_CASE("S3: a bucket without a configuration gets the abort rule under the prefix only") {
  auto xml = lc::s3_configuration({"archive/", 3, false, false}, "");
  REQUIRE(xml.ok());
  pugi::xml_document doc;
  REQUIRE(doc.load_string(xml.value().c_str()));
  CHECK(std::string(doc.document_element().name()) == "LifecycleConfiguration");
  CHECK(std::string(doc.document_element().attribute("xmlns").value()) ==
        "http://s3.amazonaws.com/doc/2006-03-01/");
  CHECK(lc::s3_rule_ids(xml.value()).value() == std::vector<std::string>{"lodge-abort-incomplete-uploads"});
  auto r = rule_by_id(doc, "lodge-abort-incomplete-uploads");
  CHECK(at(r, "Filter/Prefix") == "archive/");
  CHECK(at(r, "Status") == "Enabled");
  CHECK(at(r, "AbortIncompleteMultipartUpload/DaysAfterInitiation") == "3");
  CHECK_FALSE(r.child("Expiration"));
}

TEST_CASE("S3: with tag_state, objects tagged lodge-state=pending under the prefix expire") {
  auto xml = lc::s3_configuration({"archive/", 1, true, false}, "");
  REQUIRE(xml.ok());
  pugi::xml_document doc;
  REQUIRE(doc.load_string(xml.value().c_str()));
  auto r = rule_by_id(doc, "lodge-expire-pending");
  REQUIRE(r);
  CHECK(at(r, "Filter/And/Prefix") == "archive/");
  CHECK(at(r, "Filter/And/Tag/Key") == "lodge-state");
  CHECK(at(r, "Filter/And/Tag/Value") == "pending");
  CHECK(at(r, "Expiration/Days") == "1");
  CHECK_FALSE(r.child("AbortIncompleteMultipartUpload")); // S3 refuses it beside a tag filter

  // At the bucket root there is no prefix to AND with: the tag alone is the filter.
  auto root = lc::s3_configuration({"", 1, true, false}, "");
  REQUIRE(root.ok());
  pugi::xml_document rd;
  REQUIRE(rd.load_string(root.value().c_str()));
  auto rr = rule_by_id(rd, "lodge-expire-pending");
  CHECK_FALSE(rr.child("Filter").child("And"));
  CHECK(at(rr, "Filter/Tag/Key") == "lodge-state");
  CHECK(at(rule_by_id(rd, "lodge-abort-incomplete-uploads"), "Filter/Prefix").empty());
}

TEST_CASE("S3: a versioned bucket also expires noncurrent versions under the prefix") {
  auto xml = lc::s3_configuration({"p/", 7, false, true}, "");
  REQUIRE(xml.ok());
  pugi::xml_document doc;
  REQUIRE(doc.load_string(xml.value().c_str()));
  auto r = rule_by_id(doc, "lodge-expire-noncurrent");
  REQUIRE(r);
  CHECK(at(r, "Filter/Prefix") == "p/");
  CHECK(at(r, "NoncurrentVersionExpiration/NoncurrentDays") == "7");
  CHECK(at(r, "Expiration/ExpiredObjectDeleteMarker") == "true");
  CHECK_FALSE(rule_by_id(doc, "lodge-expire-pending"));
}

TEST_CASE("S3: merging keeps another tool's rule as the server gave it and replaces lodge's own") {
  auto foreign = data("lifecycle_foreign.xml"); // captured from moto: other-tool-archive
  auto first = lc::s3_configuration({"archive/", 1, true, false}, foreign);
  REQUIRE(first.ok());
  CHECK(lc::s3_rule_ids(first.value()).value() == std::vector<std::string>{"other-tool-archive",
                                                                           "lodge-abort-incomplete-uploads",
                                                                           "lodge-expire-pending"});
  pugi::xml_document doc;
  REQUIRE(doc.load_string(first.value().c_str()));
  auto other = rule_by_id(doc, "other-tool-archive");
  CHECK(at(other, "Filter/Prefix") == "logs/");
  CHECK(at(other, "Transition/StorageClass") == "GLACIER");
  CHECK(at(other, "Expiration/Days") == "365");

  // Merging again (what the bucket holds after an apply) changes nothing: idempotent.
  auto again = lc::s3_configuration({"archive/", 1, true, false}, first.value());
  REQUIRE(again.ok());
  CHECK(again.value() == first.value());

  // Other days, tag_state off: lodge's rules are replaced, never duplicated; the other stays.
  auto changed = lc::s3_configuration({"archive/", 5, false, false}, first.value());
  REQUIRE(changed.ok());
  CHECK(lc::s3_rule_ids(changed.value()).value() ==
        std::vector<std::string>{"other-tool-archive", "lodge-abort-incomplete-uploads"});
  pugi::xml_document cd;
  REQUIRE(cd.load_string(changed.value().c_str()));
  CHECK(at(rule_by_id(cd, "lodge-abort-incomplete-uploads"),
           "AbortIncompleteMultipartUpload/DaysAfterInitiation") == "5");
}

TEST_CASE("S3: a configuration that cannot be read is never replaced") {
  for (const auto &bad : {data("hostile_xxe.xml"), data("hostile_billion_laughs.xml"),
                          std::string("<Lifecycle"), std::string("<Error><Code>x</Code></Error>")}) {
    auto r = lc::s3_configuration({"p/", 1, false, false}, bad);
    REQUIRE_FALSE(r.ok());
    CHECK(r.error().code == Errc::storage_error);
    CHECK(r.error().message.find("cannot be read") != std::string::npos);
  }
}

TEST_CASE("S3: more than 1000 rules with lodge's is refused") {
  std::string big = "<LifecycleConfiguration>";
  for (int i = 0; i < 1000; ++i)
    big += "<Rule><ID>t" + std::to_string(i) + "</ID><Status>Enabled</Status></Rule>";
  big += "</LifecycleConfiguration>";
  auto r = lc::s3_configuration({"p/", 1, false, false}, big);
  REQUIRE_FALSE(r.ok());
  CHECK(r.error().message.find("1000") != std::string::npos);
}

TEST_CASE("Azure: the management policy deletes pending block blobs under container/prefix") {
  auto j = nlohmann::json::parse(lc::azure_management_policy("photos", "archive/2024", 2));
  REQUIRE(j["rules"].size() == 1);
  const auto &r = j["rules"][0];
  CHECK(r["name"] == "lodge-pending-backstop");
  CHECK(r["enabled"] == true);
  CHECK(r["type"] == "Lifecycle");
  const auto &f = r["definition"]["filters"];
  CHECK(f["blobTypes"] == nlohmann::json::array({"blockBlob"}));
  CHECK(f["prefixMatch"] == nlohmann::json::array({"photos/archive/2024/"}));
  CHECK(f["blobIndexMatch"] == nlohmann::json::parse(R"([{"name":"state","op":"==","value":"pending"}])"));
  CHECK(r["definition"]["actions"]["baseBlob"]["delete"]["daysAfterModificationGreaterThan"] == 2);
  auto whole = nlohmann::json::parse(lc::azure_management_policy("photos", "", 1));
  CHECK(whole["rules"][0]["definition"]["filters"]["prefixMatch"][0] == "photos/");
  CHECK(lc::azure_apply_hint("acct").find(
            "az storage account management-policy create --account-name acct") != std::string::npos);
}

TEST_CASE("Azure: the store's backstop rule is the management policy built above, with its apply hint") {
  store::StoreOptions o;
  o.url = "az://photos/archive/2024";
  o.env = {{"AZURE_STORAGE_CONNECTION_STRING", "UseDevelopmentStorage=true"}};
  auto st = store::open_backend(o)->connect(); // no request: the rule is made from the URL alone
  auto rule = st->lifecycle_rule(2);
  REQUIRE(rule.ok());
  CHECK(rule->format == "azure-management-policy-json");
  CHECK_FALSE(rule->can_apply);
  CHECK(rule->document == lc::azure_management_policy("photos", "archive/2024/", 2) + "\n");
  CHECK(rule->apply_hint == lc::azure_apply_hint("devstoreaccount1"));
  auto bad = st->lifecycle_rule(0);
  REQUIRE_FALSE(bad.ok());
  CHECK(bad.error().code == Errc::usage);
}
