// resolve_sqs_options: an SQS queue's region, endpoint and credentials.

#include <lodge/aws/aws_config.hpp>
#include <lodge/aws/credential_chain.hpp>
#include <lodge/aws/credentials.hpp>
#include <lodge/mq/settings.hpp>

namespace lodge::mq {
namespace {

std::string env_or(const std::map<std::string, std::string> &env, const char *name,
                   const std::string &fallback = {}) {
  auto it = env.find(name);
  return it != env.end() && !it->second.empty() ? it->second : fallback;
}

} // namespace

QueueOptions resolve_sqs_options(const SqsInputs &in, const util::Clock &clock) {
  QueueOptions o;
  auto shared = aws::AwsShared::load({in.env, in.profile, in.profile_source});
  std::string region = in.region;
  if (region.empty()) region = env_or(in.env, "AWS_REGION", env_or(in.env, "AWS_DEFAULT_REGION"));
  if (region.empty())
    if (auto r = shared.get("region")) region = r->value;
  if (!region.empty()) o.region = region;
  o.endpoint = env_or(in.env, "AWS_ENDPOINT_URL_SQS", env_or(in.env, "AWS_ENDPOINT_URL"));
  auto chain = aws::resolve_credential_chain(in.env, shared);
  if (!chain.credentials) throw LodgeError(chain.credentials.error());
  o.credentials = std::make_shared<aws::CredentialSource>(
      chain.credentials.value(),
      [env = in.env, shared] { return aws::resolve_credential_chain(env, shared).credentials; }, clock);
  return o;
}

} // namespace lodge::mq
