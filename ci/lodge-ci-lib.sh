# Sourced by the lodge-ci-*.sh steps of the CI templates (ci/github/action.yml,
# ci/gitlab/lodge.gitlab-ci.yml). POSIX sh; needs only lodge, curl and coreutils.

# The lodge to run: LODGE_BIN, else the one on PATH.
lodge_ci_bin=${LODGE_BIN:-lodge}

# Runs lodge without the templates' own variables (LODGE_CI_*, LODGE_BIN), which lodge would
# warn about as LODGE_* variables it does not know.
lodge_ci_lodge() {
    # shellcheck disable=SC2046 # one -u NAME pair per variable
    env $(env | sed -n 's/^\(LODGE_CI_[A-Za-z0-9_]*\)=.*/-u \1/p') -u LODGE_BIN "$lodge_ci_bin" "$@"
}

lodge_ci_fail() {
    echo "lodge-ci: error: $*" >&2
    exit 2
}

# A template passes every setting, set or not: an empty one is left to lodge's own defaults.
for lodge_ci_v in LODGE_STORE LODGE_CONFIG LODGE_DB LODGE_OWNER AWS_REGION; do
    eval "[ -n \"\${$lodge_ci_v:-}\" ] || unset $lodge_ci_v"
done

# Sets lodge_ci_metadata to --ci-metadata (the job's commit, ref, run id and URL recorded on
# each file: cicommit, ciref, cirun, ciurl, cisystem, cirepo, cireftype), or to nothing when
# LODGE_CI_METADATA is false.
lodge_ci_metadata_flag() {
    case ${LODGE_CI_METADATA:-true} in
    true) lodge_ci_metadata=--ci-metadata ;;
    false) lodge_ci_metadata= ;;
    *) lodge_ci_fail "LODGE_CI_METADATA is '$LODGE_CI_METADATA': expected true or false" ;;
    esac
}

# A directory for this job's files: the runner's temp directory when it has one.
lodge_ci_tmp() {
    d=${RUNNER_TEMP:-${TMPDIR:-/tmp}}/lodge-ci
    (umask 077 && mkdir -p "$d") && printf '%s\n' "$d"
}

# Credentials from the CI's OIDC token (no stored keys): with LODGE_CI_ROLE_ARN set, the
# token is written to a file and lodge exchanges it at STS (AssumeRoleWithWebIdentity) through
# AWS_ROLE_ARN + AWS_WEB_IDENTITY_TOKEN_FILE, as the AWS SDKs do. GitLab hands the token in a
# variable (id_tokens: LODGE_CI_ID_TOKEN); GitHub Actions serves it to a job with
# `permissions: id-token: write` at ACTIONS_ID_TOKEN_REQUEST_URL.
lodge_ci_credentials() {
    [ -n "${LODGE_CI_ROLE_ARN:-}" ] || return 0
    token_file=$(lodge_ci_tmp)/web-identity-token
    if [ -n "${LODGE_CI_ID_TOKEN:-}" ]; then
        (umask 077 && printf '%s' "$LODGE_CI_ID_TOKEN" > "$token_file")
    elif [ -n "${ACTIONS_ID_TOKEN_REQUEST_URL:-}" ]; then
        [ -n "${ACTIONS_ID_TOKEN_REQUEST_TOKEN:-}" ] ||
            lodge_ci_fail "ACTIONS_ID_TOKEN_REQUEST_TOKEN is not set: give the job 'permissions: id-token: write'"
        answer=$(curl --silent --show-error --fail \
            -H "Authorization: bearer $ACTIONS_ID_TOKEN_REQUEST_TOKEN" \
            "$ACTIONS_ID_TOKEN_REQUEST_URL&audience=${LODGE_CI_AUDIENCE:-sts.amazonaws.com}") ||
            lodge_ci_fail "could not get the job's OIDC token from ACTIONS_ID_TOKEN_REQUEST_URL"
        # {"count":…,"value":"<the JWT>"}; a JWT holds no quote.
        token=$(printf '%s' "$answer" | sed -n 's/.*"value" *: *"\([^"]*\)".*/\1/p')
        [ -n "$token" ] || lodge_ci_fail "no token in the answer of ACTIONS_ID_TOKEN_REQUEST_URL"
        (umask 077 && printf '%s' "$token" > "$token_file")
    else
        lodge_ci_fail "LODGE_CI_ROLE_ARN is set but this job has no OIDC token (GitLab: id_tokens: LODGE_CI_ID_TOKEN; GitHub: permissions: id-token: write)"
    fi
    AWS_ROLE_ARN=$LODGE_CI_ROLE_ARN
    AWS_WEB_IDENTITY_TOKEN_FILE=$token_file
    AWS_ROLE_SESSION_NAME=${AWS_ROLE_SESSION_NAME:-lodge-${GITHUB_RUN_ID:-${CI_JOB_ID:-ci}}}
    export AWS_ROLE_ARN AWS_WEB_IDENTITY_TOKEN_FILE AWS_ROLE_SESSION_NAME
    # The token, not a key the runner happens to carry, is what this job uses.
    unset AWS_ACCESS_KEY_ID AWS_SECRET_ACCESS_KEY AWS_SESSION_TOKEN
}

# One value (one line) for the jobs and steps after this one: GitHub's step output NAME
# ($GITHUB_OUTPUT), and VARIABLE in the dotenv file LODGE_CI_DOTENV (GitLab's
# artifacts:reports:dotenv, whose variables the later jobs of the pipeline get).
lodge_ci_output() { # NAME VARIABLE VALUE
    if [ -n "${GITHUB_OUTPUT:-}" ]; then printf '%s=%s\n' "$1" "$3" >> "$GITHUB_OUTPUT"; fi
    if [ -n "${LODGE_CI_DOTENV:-}" ]; then printf '%s=%s\n' "$2" "$3" >> "$LODGE_CI_DOTENV"; fi
    return 0
}
