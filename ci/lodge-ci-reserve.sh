#!/bin/sh
# Direct uploads, step 2 (a job with credentials; it never sees the bytes): `lodge reserve` for
# the file step 1 described (LODGE_CI_NAME, LODGE_CI_SIZE, LODGE_CI_SHA256) under LODGE_CI_PREFIX,
# the presigned PUT written to LODGE_CI_PUT (default put.txt: an artifact for step 3; the URL is
# a credential for that one object until it expires, LODGE_CI_EXPIRES, default 30m), the id and
# outcome as outputs (GitHub: id, outcome; dotenv: LODGE_CI_ID, LODGE_CI_OUTCOME). The job's
# commit, ref, run id and URL are recorded on the file unless LODGE_CI_METADATA is false.
set -eu
. "$(dirname "$0")/lodge-ci-lib.sh"
for v in LODGE_CI_NAME LODGE_CI_SIZE LODGE_CI_SHA256; do
    eval "[ -n \"\${$v:-}\" ]" || lodge_ci_fail "$v is not set (lodge-ci-describe.sh sets it)"
done
lodge_ci_metadata_flag
lodge_ci_credentials
put=${LODGE_CI_PUT:-put.txt}
status=0
# shellcheck disable=SC2086 # the flag, or nothing
(umask 077 && lodge_ci_lodge reserve "$LODGE_CI_NAME" --size "$LODGE_CI_SIZE" --sha256 "$LODGE_CI_SHA256" $lodge_ci_metadata \
    ${LODGE_CI_PREFIX:+--prefix "$LODGE_CI_PREFIX"} --expires "${LODGE_CI_EXPIRES:-30m}" \
    --idempotency-key "${LODGE_CI_IDEMPOTENCY_KEY:-${CI_PIPELINE_ID:-${GITHUB_RUN_ID:-}}-$LODGE_CI_NAME}" \
    > "$put") || status=$?
# Its first line: "reserved #12 KEY", "replayed #12 KEY" (a retried job) or "duplicate #9 KEY"
# (the content is stored already: nothing to send or confirm).
first=$(head -n 1 "$put")
outcome=${first%% *}
id=$(printf '%s\n' "$first" | sed -n 's/^[a-z_]* #\([0-9][0-9]*\) .*/\1/p')
lodge_ci_output id LODGE_CI_ID "$id"
lodge_ci_output outcome LODGE_CI_OUTCOME "$outcome"
[ "$status" -eq 0 ] || { cat "$put" >&2; exit "$status"; }
echo "lodge-ci: $outcome #$id" >&2
