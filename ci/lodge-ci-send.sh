#!/bin/sh
# Direct uploads, step 3 (the runner without credentials): sends FILE exactly as the
# reservation printed (the method, the URL and every header) with curl.
#   Usage: lodge-ci-send.sh FILE [PUT]     (PUT: step 2's file, default put.txt)
set -eu
. "$(dirname "$0")/lodge-ci-lib.sh"
if [ $# -ge 1 ] && [ -f "$1" ]; then :; else lodge_ci_fail "usage: lodge-ci-send.sh FILE [PUT]"; fi
file=$1
put=${2:-${LODGE_CI_PUT:-put.txt}}
[ -f "$put" ] || lodge_ci_fail "$put: no such file (the artifact of lodge-ci-reserve.sh)"
# put.txt: the outcome line, "expires …", "PUT URL", one "Name: value" line a header, the curl line.
method='' url=''
set --
while IFS= read -r line; do
    case $line in
    'PUT '*) method=PUT url=${line#PUT } ;;
    'curl '*) break ;;
    *': '*) [ -n "$url" ] && set -- "$@" -H "$line" ;;
    esac
done < "$put"
if [ -z "$url" ]; then
    echo "lodge-ci: nothing to send: $(head -n 1 "$put")" >&2
    exit 0
fi
curl --silent --show-error --fail -X "$method" --upload-file "$file" "$@" "$url" > /dev/null
echo "lodge-ci: sent $file" >&2
