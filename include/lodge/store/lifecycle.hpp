#pragma once
// The lifecycle rules that back up sweep, as the documents each cloud takes: pure
// functions, no I/O. A store's lifecycle_rule() fills them with what it read.

#include <lodge/error.hpp>
#include <string>
#include <string_view>
#include <vector>

namespace lodge::store::lifecycle {

// Every rule lodge writes has an ID (S3) or name (Azure) starting with this; a rule
// without it belongs to someone else and is kept as it is.
inline constexpr std::string_view k_rule_prefix = "lodge-";
// lodge's S3 rule expiring noncurrent versions (written when the bucket is or was versioned).
inline constexpr std::string_view k_s3_noncurrent_rule = "lodge-expire-noncurrent";
// The S3 object tag a tagging store writes: pending at upload, committed once the row is ACTIVE.
inline constexpr std::string_view k_s3_state_tag = "lodge-state";

struct S3Rules {
  std::string prefix;     // the prefix every key lodge writes starts with ("" or "archive/")
  int days = 1;           // after how many days each rule acts
  bool tag_state = false; // expire objects still tagged lodge-state=pending
  bool versioned = false; // the bucket is (or was) versioned: expire noncurrent versions
};

// The S3 lifecycle configuration to PUT: every element of `existing` (what
// GetBucketLifecycleConfiguration returned; "" when the bucket has none) except the rules
// whose ID starts with "lodge-", followed by lodge's rules. STORAGE_ERROR when `existing`
// cannot be read (malformed, a DOCTYPE, not a LifecycleConfiguration) or the result would
// pass S3's 1000 rules: never a document that would drop another tool's rules.
[[nodiscard]] Result<std::string> s3_configuration(const S3Rules &rules, std::string_view existing);

// The rule IDs of an S3 lifecycle configuration, in document order (STORAGE_ERROR when
// unreadable, as above).
[[nodiscard]] Result<std::vector<std::string>> s3_rule_ids(std::string_view xml);

// Azure Storage's management policy (JSON) with the one rule "lodge-pending-backstop":
// delete block blobs under container/prefix whose index tag state is still "pending"
// `days` after they were last modified.
[[nodiscard]] std::string azure_management_policy(const std::string &container, const std::string &prefix,
                                                  int days);
// How to install that policy (a management-plane call, which a storage key cannot make).
[[nodiscard]] std::string azure_apply_hint(const std::string &account);

} // namespace lodge::store::lifecycle
