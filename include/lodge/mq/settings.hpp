#pragma once
// An SQS queue's settings, resolved as an s3:// store's are: the AWS shared files' profile,
// the SDKs' credential chain, the region; the CLI hands in what it read (the flags, the
// environment) and gets what open_queue needs.

#include <lodge/mq/queue.hpp>
#include <lodge/util/clock.hpp>
#include <map>
#include <string>

namespace lodge::mq {

// What the CLI read for a queue: nothing here is looked up by the mq layer itself.
struct SqsInputs {
  std::map<std::string, std::string> env; // the process environment, as read by the CLI
  std::string profile;                    // --profile ("" when not given)
  std::string profile_source;             // where it came from ("flag --profile"; "" when none)
  std::string region;                     // --region ("" when not given)
};

// The region: `in.region`, else AWS_REGION, AWS_DEFAULT_REGION, else the profile's region,
// else open_queue's default. The endpoint (for sqs://NAME; a URL's own wins): AWS_ENDPOINT_URL_SQS
// or AWS_ENDPOINT_URL (as the AWS CLI reads them), else AWS's. The credentials: the chain's
// (environment, profile, ...), walked again by `clock`'s source when they near expiry.
// Throws LodgeError(CONFIG_INVALID) for a bad shared file or profile, or when the chain finds
// no credentials.
[[nodiscard]] QueueOptions resolve_sqs_options(const SqsInputs &in, const util::Clock &clock);

} // namespace lodge::mq
