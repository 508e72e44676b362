"""Credentials, regions and endpoints as the AWS CLI resolves them: one test per row of the
precedence table in man/lodge.1, each running the real lodge through a recording proxy in
front of moto and asserting what was signed (access key id, region) and where it was sent
(Host), then reading back with the aws CLI what landed.

Every source in a row names the proxy under a different loopback name (curl resolves
NAME.localhost itself), so the Host recorded says which source won."""

import json
import os
import re
import sys
import time
import unittest
import uuid

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "harness"))
from lodgetest import LodgeTestCase, Moto, aws, main, s3_client  # noqa: E402
from metadatafake import MetadataFake  # noqa: E402
from recordproxy import RecordingProxy  # noqa: E402


class AwsConventions(LodgeTestCase):
    @classmethod
    def setUpClass(cls):
        cls.moto = Moto()
        cls.s3 = s3_client(cls.moto.endpoint)
        cls.buckets = []
        cls.proxy = RecordingProxy(cls.moto.port, buckets=lambda: cls.buckets)

    @classmethod
    def tearDownClass(cls):
        cls.proxy.stop()
        cls.moto.stop()

    def setUp(self):
        super().setUp()
        self.bucket = "b-" + uuid.uuid4().hex[:20]
        self.s3.create_bucket(Bucket=self.bucket)
        self.buckets.append(self.bucket)
        self.store = f"s3://{self.bucket}/lodge"
        # Nothing AWS from the harness: each row says exactly what it sets.
        self.env = {k: v for k, v in self.env.items() if not k.startswith("AWS_")}
        # No instance metadata beyond loopback: the IMDS tests point lodge at a fake instead.
        self.env["AWS_EC2_METADATA_DISABLED"] = "true"
        self.env.update({"LODGE_STORE": self.store, "LODGE_OWNER": "ci"})
        self.proxy.clear()
        self.file = self.write("small.txt", "hello, " + self.bucket + "\n")

    def at(self, name):
        """The proxy under loopback name `name` (NAME.localhost)."""
        return self.proxy.endpoint(f"{name}.localhost")

    def aws_files(self, config="", credentials=""):
        if config:
            self.write(".aws/config", config)
        if credentials:
            self.write(".aws/credentials", credentials)

    def lodge_json_config(self, **settings):
        return self.write("lodge.json", json.dumps(settings))

    def run_lodge(self, *flags, env=None):
        """init, then upload one small file: each reaches the store. Fails unless both do."""
        r = self.lodge(*flags, "init", env=env)
        self.assertEqual(r.rc, 0, r)
        r = self.lodge(*flags, "--json", "upload", self.file, env=env)
        self.assertEqual(r.rc, 0, r)
        self.assertEqual(r.json_lines()[0]["outcome"], "active", r)
        return r

    def run_to_aws(self, env):
        """init, then an upload that reaches for AWS itself: through HTTPS_PROXY, whose
        CONNECT the proxy records and refuses. Returns the upload's result."""
        env = dict(env, HTTPS_PROXY=self.proxy.endpoint(), NO_PROXY="")
        r = self.lodge("init", env=env)
        self.assertEqual(r.rc, 0, r)
        up = self.lodge("upload", self.file, env=env)
        self.assertNotEqual(up.rc, 0, up)
        return r, up

    def tunnels(self):
        return sorted({x.host for x in self.proxy.requests() if x.method == "CONNECT"})

    def assert_sent(self, host, key_id, region):
        """Every request went to `host`, signed by `key_id` for `region`, service s3; and the
        upload landed in the bucket (read back with the aws CLI, straight from moto)."""
        reqs = self.proxy.requests()
        self.assertTrue(reqs, "lodge sent nothing through the proxy")
        self.assertEqual({(r.host, r.key_id, r.region, r.service) for r in reqs},
                         {(f"{host}:{self.proxy.port}", key_id, region, "s3")}, reqs)
        listing = aws(self.moto.endpoint, "s3api", "list-objects-v2", "--bucket", self.bucket,
                      "--prefix", "lodge/ci/")
        keys = [o["Key"] for o in (listing or {}).get("Contents", [])]
        self.assertEqual(len(keys), 1, listing)
        body = os.path.join(self.dir, "back.txt")
        aws(self.moto.endpoint, "s3api", "get-object", "--bucket", self.bucket, "--key", keys[0], body)
        with open(body) as f, open(self.file) as g:
            self.assertEqual(f.read(), g.read())

    # --- one test per row of the precedence table (man/lodge.1, README) ---

    def full_stack(self):
        """Every source below the flags set, each to its own name and region."""
        self.aws_files(config=("[profile p]\nregion = eu-north-1\nendpoint_url = " + self.at("profile") +
                               "\nservices = loc\n[services loc]\ns3 =\n  endpoint_url = " + self.at("services") +
                               "\n"),
                       credentials="[p]\naws_access_key_id = AKIDFILE\naws_secret_access_key = s\n")
        cfg = self.lodge_json_config(endpoint=self.at("jsonfile"), region="ca-central-1")
        env = {"LODGE_ENDPOINT": self.at("lodgeenv"), "LODGE_REGION": "sa-east-1",
               "AWS_ENDPOINT_URL_S3": self.at("awss3env"), "AWS_ENDPOINT_URL": self.at("awsenv"),
               "AWS_REGION": "ap-south-1", "AWS_DEFAULT_REGION": "ap-east-1", "AWS_PROFILE": "p",
               "AWS_ACCESS_KEY_ID": "AKIDENV", "AWS_SECRET_ACCESS_KEY": "envsecret", "LODGE_CONFIG": cfg}
        return env

    def test_row1_flags_beat_everything(self):
        env = self.full_stack()
        self.run_lodge("--endpoint", self.at("flag"), "--region", "eu-west-3", env=env)
        self.assert_sent("flag.localhost", "AKIDENV", "eu-west-3")

    def test_row2_lodge_env_beats_aws_env_and_files(self):
        env = self.full_stack()
        self.run_lodge(env=env)
        self.assert_sent("lodgeenv.localhost", "AKIDENV", "sa-east-1")

    def test_row3_aws_env_service_specific_and_aws_region_beat_the_files(self):
        env = self.full_stack()
        del env["LODGE_ENDPOINT"], env["LODGE_REGION"]
        self.run_lodge(env=env)
        self.assert_sent("awss3env.localhost", "AKIDENV", "ap-south-1")

    def test_row3b_aws_endpoint_url_and_default_region_beat_the_files(self):
        env = self.full_stack()
        del env["LODGE_ENDPOINT"], env["LODGE_REGION"], env["AWS_ENDPOINT_URL_S3"], env["AWS_REGION"]
        self.run_lodge(env=env)
        self.assert_sent("awsenv.localhost", "AKIDENV", "ap-east-1")

    def test_row4_lodge_config_file_beats_the_aws_profile(self):
        env = self.full_stack()
        for k in ("LODGE_ENDPOINT", "LODGE_REGION", "AWS_ENDPOINT_URL_S3", "AWS_ENDPOINT_URL", "AWS_REGION",
                  "AWS_DEFAULT_REGION"):
            del env[k]
        self.run_lodge(env=env)
        self.assert_sent("jsonfile.localhost", "AKIDENV", "ca-central-1")

    def test_row5_profile_services_endpoint_region_and_keys(self):
        # AWS_CONFIG_FILE names the file; the profile's [services] s3 endpoint beats its endpoint_url.
        path = self.write("elsewhere/aws-config",
                          "[profile p]\nregion = eu-north-1\nendpoint_url = " + self.at("profile") +
                          "\nservices = loc\naws_access_key_id = AKIDCONFIG\naws_secret_access_key = c\n"
                          "[services loc]\ns3 =\n  endpoint_url = " + self.at("services") + "\n")
        self.run_lodge(env={"AWS_PROFILE": "p", "AWS_CONFIG_FILE": path})
        self.assert_sent("services.localhost", "AKIDCONFIG", "eu-north-1")

    def test_row5b_profile_endpoint_url_and_credentials_file_keys_win(self):
        self.aws_files(config=("[profile p]\nregion = us-west-2\nendpoint_url = " + self.at("profile") +
                               "\naws_access_key_id = AKIDCONFIG\naws_secret_access_key = c\n"),
                       credentials="[p]\naws_access_key_id = AKIDCREDS\naws_secret_access_key = k\n")
        self.run_lodge(env={"AWS_DEFAULT_PROFILE": "p"})
        self.assert_sent("profile.localhost", "AKIDCREDS", "us-west-2")

    def test_row5c_default_profile_of_both_files(self):
        self.aws_files(config="[default]\nregion = eu-south-1\nendpoint_url = " + self.at("default") + "\n",
                       credentials="[default]\naws_access_key_id = AKIDDEFAULT\naws_secret_access_key = k\n")
        self.run_lodge()
        self.assert_sent("default.localhost", "AKIDDEFAULT", "eu-south-1")

    def test_row6_defaults_go_to_aws_in_us_east_1_and_say_so(self):
        # No endpoint anywhere: AWS itself, virtual-hosted. HTTPS_PROXY catches the tunnel.
        env = {"AWS_ACCESS_KEY_ID": "AKIDENV", "AWS_SECRET_ACCESS_KEY": "s"}
        r, _ = self.run_to_aws(env)
        self.assertEqual(self.tunnels(), [f"{self.bucket}.s3.us-east-1.amazonaws.com:443"])
        self.assertEqual([x.method for x in self.proxy.requests() if x.method != "CONNECT"], [])
        warnings = [line for line in r.err.splitlines() if "assuming region" in line]
        self.assertEqual(warnings, ["lodge: warning: no S3 endpoint or region configured: assuming region us-east-1 "
                                    "(set --region, AWS_REGION or region in the AWS config profile)"], r)
        quiet = self.lodge("-q", "config", env=env)
        self.assertEqual(quiet.rc, 0, quiet)
        self.assertNotIn("assuming region", quiet.err)

    def test_row6b_profile_region_without_endpoint_goes_to_that_region(self):
        self.aws_files(config="[default]\nregion = eu-west-1\n")
        r, up = self.run_to_aws({"AWS_ACCESS_KEY_ID": "AKIDENV", "AWS_SECRET_ACCESS_KEY": "s"})
        self.assertEqual(self.tunnels(), [f"{self.bucket}.s3.eu-west-1.amazonaws.com:443"])
        self.assertNotIn("assuming region", r.err + up.err)

    def test_row7_ignore_configure_endpoint_urls_drops_aws_endpoints(self):
        env = self.full_stack()
        for k in ("LODGE_ENDPOINT", "LODGE_REGION"):
            del env[k]
        env["AWS_IGNORE_CONFIGURE_ENDPOINT_URLS"] = "true"
        self.run_lodge(env=env)  # AWS_ENDPOINT_URL(_S3) dropped: lodge's own config file's endpoint
        self.assert_sent("jsonfile.localhost", "AKIDENV", "ap-south-1")

    def test_row7b_ignore_in_the_profile_drops_the_profile_endpoint(self):
        self.aws_files(config=("[profile p]\nregion = eu-north-1\nendpoint_url = http://never.invalid:1\n"
                               "ignore_configure_endpoints_urls = true\n"))
        self.run_to_aws({"AWS_PROFILE": "p", "AWS_ACCESS_KEY_ID": "AKIDENV", "AWS_SECRET_ACCESS_KEY": "s"})
        self.assertEqual(self.tunnels(), [f"{self.bucket}.s3.eu-north-1.amazonaws.com:443"])

    # --- credentials and the other settings ---

    def test_partial_env_credentials_are_an_error_not_the_files(self):
        self.aws_files(credentials="[default]\naws_access_key_id = AKIDFILE\naws_secret_access_key = k\n")
        r = self.lodge("--endpoint", self.at("flag"), "init", env={"AWS_ACCESS_KEY_ID": "AKIDENV"})
        self.assertEqual(r.rc, 2, r)
        self.assertIn("partial credentials found in the environment: AWS_ACCESS_KEY_ID is set but "
                      "AWS_SECRET_ACCESS_KEY is missing", r.err)
        self.assertEqual(self.proxy.requests(), [])

    def test_a_profile_neither_file_has_is_an_error_naming_it(self):
        self.aws_files(config="[profile other]\nregion = eu-west-1\n")
        r = self.lodge("--endpoint", self.at("flag"), "init", env={"AWS_PROFILE": "ci"})
        self.assertEqual(r.rc, 2, r)
        self.assertIn("The config profile (ci) could not be found", r.err)
        self.assertEqual(self.proxy.requests(), [])
        self.assertFalse(os.path.exists(self.db), "nothing is created on a configuration error")

    def test_profile_flag_beats_aws_profile(self):
        self.aws_files(config=("[profile a]\nregion = eu-west-1\nendpoint_url = " + self.at("a") + "\n"
                               "[profile b]\nregion = eu-west-2\nendpoint_url = " + self.at("b") + "\n"),
                       credentials=("[a]\naws_access_key_id = AKIDA\naws_secret_access_key = k\n"
                                    "[b]\naws_access_key_id = AKIDB\naws_secret_access_key = k\n"))
        self.run_lodge("--profile", "b", env={"AWS_PROFILE": "a"})
        self.assert_sent("b.localhost", "AKIDB", "eu-west-2")

    def test_virtual_addressing_style_from_the_profile(self):
        self.aws_files(config=("[default]\nregion = us-east-2\nendpoint_url = " + self.proxy.endpoint("localhost") +
                               "\ns3 =\n  addressing_style = virtual\n"),
                       credentials="[default]\naws_access_key_id = AKIDV\naws_secret_access_key = k\n")
        self.run_lodge()
        self.assert_sent(f"{self.bucket}.localhost", "AKIDV", "us-east-2")
        self.assertTrue(all(not r.path.startswith("/" + self.bucket) for r in self.proxy.requests()))

    def test_max_attempts_from_the_profile_bounds_the_retries(self):
        self.aws_files(config="[default]\nregion = us-east-1\nmax_attempts = 2\nretry_mode = adaptive\n",
                       credentials="[default]\naws_access_key_id = AKIDM\naws_secret_access_key = k\n")
        env = {"AWS_ENDPOINT_URL": self.at("retry")}
        r = self.lodge("init", env=env)
        self.assertEqual(r.rc, 0, r)
        self.proxy.clear()
        self.proxy.fail_next(5, method="PUT")
        r = self.lodge("--json", "upload", self.file, env=env)
        self.assertNotEqual(r.rc, 0, r)
        puts = [x for x in self.proxy.requests() if x.method == "PUT"]
        self.assertEqual(len(puts), 2, self.proxy.requests())
        c = self.lodge("--json", "config", env=env).json()["s3"]
        self.assertEqual(c["max_attempts"], {"value": 2, "source": f"file {self.dir}/.aws/config [default]"})
        self.assertEqual(c["retry_mode"], {"value": "adaptive", "source": f"file {self.dir}/.aws/config [default]"})

    # --- web identity (CI: AWS_ROLE_ARN + AWS_WEB_IDENTITY_TOKEN_FILE, moto's STS for AWS's) ---

    def test_web_identity_exchanges_the_token_at_sts_and_signs_with_temporary_keys(self):
        token = self.write("token.jwt", "eyJhbGciOiJSUzI1NiJ9.eyJzdWIiOiJyZXBvOmFjbWUifQ.c2ln\n")
        self.aws_files(credentials="[default]\naws_access_key_id = AKIDSTATIC\naws_secret_access_key = k\n")
        env = {"AWS_ROLE_ARN": "arn:aws:iam::123456789012:role/ci", "AWS_WEB_IDENTITY_TOKEN_FILE": token,
               "AWS_ROLE_SESSION_NAME": "run-42", "AWS_ENDPOINT_URL": self.at("ci"), "AWS_REGION": "eu-west-1"}
        self.run_lodge(env=env)
        reqs = self.proxy.requests()
        sts = [r for r in reqs if r.form is not None]
        self.assertEqual(len(sts), 2, reqs)  # init and upload: one exchange per process
        for r in sts:
            self.assertIsNone(r.key_id, "AssumeRoleWithWebIdentity is unsigned")
            self.assertEqual(r.host, f"ci.localhost:{self.proxy.port}")
            self.assertIn("Action=AssumeRoleWithWebIdentity", r.form)
            self.assertIn("RoleArn=arn%3Aaws%3Aiam%3A%3A123456789012%3Arole%2Fci", r.form)
            self.assertIn("RoleSessionName=run-42", r.form)
            self.assertIn("WebIdentityToken=eyJhbGciOiJSUzI1NiJ9.eyJzdWIiOiJyZXBvOmFjbWUifQ.c2ln", r.form)
        signed = [r for r in reqs if r.form is None]
        self.assertTrue(signed)
        for r in signed:
            self.assertTrue(r.key_id.startswith("ASIA"), r)  # moto's temporary key, not AKIDSTATIC
            self.assertTrue(r.security_token, r)
            self.assertEqual((r.host, r.region, r.service), (f"ci.localhost:{self.proxy.port}", "eu-west-1", "s3"))
        listing = aws(self.moto.endpoint, "s3api", "list-objects-v2", "--bucket", self.bucket, "--prefix", "lodge/ci/")
        self.assertEqual(len(listing["Contents"]), 1, listing)
        explain = self.lodge("config", "--explain", env=env)
        self.assertEqual(explain.rc, 0, explain)
        self.assertIn("used     web identity (AWS_WEB_IDENTITY_TOKEN_FILE): STS AssumeRoleWithWebIdentity for "
                      "arn:aws:iam::123456789012:role/ci at " + self.at("ci"), explain.out)
        self.assertNotIn("eyJhbGciOiJSUzI1NiJ9", explain.out + explain.err)

    def test_web_identity_credentials_are_renewed_mid_run_before_they_expire(self):
        # moto issues them for an hour of its (real) time; this lodge runs 56m40s later, so
        # they are always within the five-minute renewal margin: every request of the run
        # must find them due and renew them (one renewal at a time), never sign with expired ones.
        token = self.write("token.jwt", "tok")
        env = {"AWS_ROLE_ARN": "arn:aws:iam::123456789012:role/ci", "AWS_WEB_IDENTITY_TOKEN_FILE": token,
               "AWS_ENDPOINT_URL": self.at("ci"), "AWS_REGION": "eu-west-1"}
        r = self.lodge("init", env=env)
        self.assertEqual(r.rc, 0, r)
        self.proxy.clear()
        r = self.lodge("--json", "upload", self.file, env=env, later="+3400s")
        self.assertEqual(r.rc, 0, r)
        reqs = self.proxy.requests()
        exchanges = [i for i, x in enumerate(reqs) if x.form is not None]
        signed = [x for x in reqs if x.form is None]
        self.assertGreaterEqual(len(exchanges), 3, reqs)  # the first, then renewals during the run
        self.assertGreaterEqual(len({x.key_id for x in signed}), 2, signed)
        # Each signed request uses keys obtained after the previous exchange: a renewal is used.
        self.assertTrue(all(x.key_id.startswith("ASIA") and x.security_token for x in signed), signed)
        listing = aws(self.moto.endpoint, "s3api", "list-objects-v2", "--bucket", self.bucket, "--prefix", "lodge/ci/")
        self.assertEqual(len(listing["Contents"]), 1, listing)

    def test_web_identity_from_the_profile_and_a_missing_token_file(self):
        token = self.write("token.jwt", "tok-from-profile")
        self.aws_files(config=("[profile ci]\nrole_arn = arn:aws:iam::123456789012:role/p\n"
                               "web_identity_token_file = " + token + "\nregion = us-west-2\n"))
        env = {"AWS_PROFILE": "ci", "AWS_ENDPOINT_URL": self.at("p")}
        self.run_lodge(env=env)
        sts = [r for r in self.proxy.requests() if r.form is not None]
        self.assertTrue(sts and all("role%2Fp" in r.form for r in sts), self.proxy.requests())
        os.unlink(token)
        r = self.lodge("--json", "upload", self.file, env=env)
        self.assertEqual(r.rc, 2, r)
        self.assertIn(token + " (web_identity_token_file in file " + self.dir + "/.aws/config [profile ci]): "
                      "cannot read the web identity token", r.err)

    # --- role_arn + source_profile: STS AssumeRole, signed by the source's credentials ---

    def test_assume_role_through_a_chain_of_source_profiles(self):
        self.aws_files(config=("[profile deploy]\nrole_arn = arn:aws:iam::123456789012:role/deploy\n"
                               "source_profile = hop\nregion = eu-west-1\nexternal_id = x-42\n"
                               "role_session_name = nightly\n"
                               "[profile hop]\nrole_arn = arn:aws:iam::123456789012:role/hop\nsource_profile = base\n"),
                       credentials=("[base]\naws_access_key_id = AKIDBASE\naws_secret_access_key = k\n"
                                    "[deploy]\naws_access_key_id = AKIDNOTME\naws_secret_access_key = k\n"))
        env = {"AWS_PROFILE": "deploy", "AWS_ENDPOINT_URL": self.at("role")}
        self.run_lodge(env=env)
        reqs = self.proxy.requests()
        sts = [r for r in reqs if r.form is not None]
        self.assertEqual(len(sts), 4, reqs)  # init and upload: two hops each
        for hop, deploy in (sts[0:2], sts[2:4]):
            self.assertEqual((hop.key_id, hop.service, hop.region), ("AKIDBASE", "sts", "eu-west-1"))
            self.assertIsNone(hop.security_token)
            self.assertIn("Action=AssumeRole&", hop.form)
            self.assertIn("RoleArn=arn%3Aaws%3Aiam%3A%3A123456789012%3Arole%2Fhop", hop.form)
            # The second hop is signed with the first's temporary keys.
            self.assertTrue(deploy.key_id.startswith("ASIA") and deploy.security_token, deploy)
            self.assertEqual((deploy.service, deploy.region), ("sts", "eu-west-1"))
            self.assertIn("RoleArn=arn%3Aaws%3Aiam%3A%3A123456789012%3Arole%2Fdeploy", deploy.form)
            self.assertIn("ExternalId=x-42", deploy.form)
            self.assertIn("RoleSessionName=nightly", deploy.form)
        signed = [r for r in reqs if r.form is None]
        self.assertTrue(signed)
        hop_keys = {sts[1].key_id, sts[3].key_id}
        for r in signed:
            self.assertTrue(r.key_id.startswith("ASIA") and r.security_token, r)
            self.assertNotIn(r.key_id, hop_keys)  # the last role's keys, not the hop's
            self.assertEqual((r.host, r.region, r.service), (f"role.localhost:{self.proxy.port}", "eu-west-1", "s3"))
        listing = aws(self.moto.endpoint, "s3api", "list-objects-v2", "--bucket", self.bucket, "--prefix", "lodge/ci/")
        self.assertEqual(len(listing["Contents"]), 1, listing)
        explain = self.lodge("config", "--explain", env=env)
        self.assertIn(f"used     assume role (role_arn in file {self.dir}/.aws/config [profile deploy]): "
                      "STS AssumeRole for arn:aws:iam::123456789012:role/deploy at " + self.at("role") +
                      ", as role of [hop] (STS AssumeRole for arn:aws:iam::123456789012:role/hop at " +
                      self.at("role") + ", as static keys of [base])", explain.out)

    def test_a_source_profile_cycle_is_an_error_with_nothing_sent(self):
        self.aws_files(config=("[profile a]\nrole_arn = arn:aws:iam::1:role/a\nsource_profile = b\n"
                               "[profile b]\nrole_arn = arn:aws:iam::1:role/b\nsource_profile = a\n"),
                       credentials="[default]\naws_access_key_id = AKIDDEF\naws_secret_access_key = k\n")
        r = self.lodge("init", env={"AWS_PROFILE": "a", "AWS_ENDPOINT_URL": self.at("cycle")})
        self.assertEqual(r.rc, 2, r)
        self.assertIn(f"role_arn in file {self.dir}/.aws/config [profile b]: source_profile makes a cycle: "
                      "a -> b -> a (CONFIG_INVALID)", r.err)
        self.assertEqual(self.proxy.requests(), [])

    # --- credential_process ---

    def credential_process(self, body):
        path = self.write("bin/creds", "#!/bin/sh\n" + body)
        os.chmod(path, 0o755)
        return path

    def test_credential_process_signs_and_runs_again_before_its_expiry(self):
        calls = os.path.join(self.dir, "calls")
        script = self.credential_process(
            f'echo "$@" >> {calls}\nn=$(wc -l < {calls})\n'
            "exp=$(date -u -d '+2 minutes' +%Y-%m-%dT%H:%M:%SZ)\n"
            'printf \'{"Version": 1, "AccessKeyId": "AKIDPROC%04d", "SecretAccessKey": "s", '
            '"SessionToken": "t%d", "Expiration": "%s"}\' "$n" "$n" "$exp"\n')
        self.aws_files(config=f"[profile p]\ncredential_process = {script} --account 42\nregion = eu-west-2\n",
                       credentials="[default]\naws_access_key_id = AKIDDEF\naws_secret_access_key = k\n")
        env = {"AWS_PROFILE": "p", "AWS_ENDPOINT_URL": self.at("proc")}
        self.run_lodge(env=env)
        reqs = self.proxy.requests()
        ids = [r.key_id for r in reqs]
        self.assertTrue(all(i.startswith("AKIDPROC") for i in ids), ids)
        self.assertTrue(all(r.security_token for r in reqs), reqs)
        # Two minutes left is inside the renewal margin: the program ran again during the run.
        with open(calls) as f:
            lines = f.read().splitlines()
        self.assertGreaterEqual(len(lines), 3, lines)
        self.assertEqual(set(lines), {"--account 42"})
        self.assertGreaterEqual(len(set(ids)), 2, ids)
        listing = aws(self.moto.endpoint, "s3api", "list-objects-v2", "--bucket", self.bucket, "--prefix", "lodge/ci/")
        self.assertEqual(len(listing["Contents"]), 1, listing)

    def test_a_failing_credential_process_is_an_error_never_another_identity(self):
        script = self.credential_process('echo \'{"Version": 1, "AccessKeyId": "LEAKED"}\'\n'
                                          "echo 'the SSO session has expired; log in again' >&2\nexit 1\n")
        self.aws_files(config=f"[profile p]\ncredential_process = {script}\n",
                       credentials="[default]\naws_access_key_id = AKIDDEF\naws_secret_access_key = k\n")
        r = self.lodge("init", env={"AWS_PROFILE": "p", "AWS_ENDPOINT_URL": self.at("proc")})
        self.assertEqual(r.rc, 2, r)
        self.assertIn(f"credential_process in file {self.dir}/.aws/config [profile p]: the program exited with "
                      "status 1: the SSO session has expired; log in again (CONFIG_INVALID)", r.err)
        self.assertNotIn("LEAKED", r.err + r.out)
        self.assertEqual(self.proxy.requests(), [])

    # --- container and instance metadata credentials (loopback fakes of the services) ---

    def test_container_credentials_with_the_authorization_token_file(self):
        fake = MetadataFake(prefix="ASIACONT", expires_in=120, container_token="Bearer c0ntainer")
        self.addCleanup(fake.stop)
        token = self.write("ecs-token", "Bearer c0ntainer\n")
        env = {"AWS_CONTAINER_CREDENTIALS_FULL_URI": fake.endpoint + "/creds",
               "AWS_CONTAINER_AUTHORIZATION_TOKEN_FILE": token, "AWS_ENDPOINT_URL": self.at("ecs")}
        self.run_lodge(env=env)
        seen = fake.requests()
        self.assertTrue(seen and all((x.method, x.path, x.headers.get("authorization")) ==
                                     ("GET", "/creds", "Bearer c0ntainer") for x in seen), seen)
        signed = self.proxy.requests()
        self.assertTrue(all(r.key_id.startswith("ASIACONT") and r.security_token for r in signed), signed)
        # They expire within the renewal margin: fetched again during the run, and used.
        self.assertGreaterEqual(fake.issued, 3)
        self.assertGreaterEqual(len({r.key_id for r in signed}), 2, signed)

        self.write("ecs-token", "Bearer wrong\n")
        self.proxy.clear()
        r = self.lodge("upload", self.file, env=env)
        self.assertNotEqual(r.rc, 0, r)
        self.assertIn(f"container credentials at {fake.endpoint}/creds (AWS_CONTAINER_CREDENTIALS_FULL_URI): "
                      "HTTP 401", r.err)
        self.assertEqual(self.proxy.requests(), [])

    def test_instance_metadata_v2_never_through_a_proxy_and_renewed(self):
        fake = MetadataFake(expires_in=120)
        self.addCleanup(fake.stop)
        # A dead proxy for plain http: the metadata calls must not go through it (S3 here is
        # *.localhost, which NO_PROXY exempts).
        env = {"AWS_EC2_METADATA_DISABLED": "false", "AWS_EC2_METADATA_SERVICE_ENDPOINT": fake.endpoint,
               "AWS_ENDPOINT_URL": self.at("ec2"), "http_proxy": "http://127.0.0.1:9", "NO_PROXY": "localhost"}
        self.run_lodge(env=env)
        seen = fake.requests()
        self.assertEqual((seen[0].method, seen[0].path), ("PUT", "/latest/api/token"))
        self.assertEqual(seen[0].headers.get("x-aws-ec2-metadata-token-ttl-seconds"), "21600")
        gets = [x for x in seen if x.method == "GET"]
        self.assertTrue(gets)
        self.assertTrue(all(x.headers.get("x-aws-ec2-metadata-token") == fake.token for x in gets), gets)
        self.assertIn("/latest/meta-data/iam/security-credentials/lodge-instance", [x.path for x in gets])
        signed = self.proxy.requests()
        self.assertTrue(all(r.key_id.startswith("ASIAIMDS") and r.security_token for r in signed), signed)
        self.assertGreaterEqual(fake.issued, 3)
        explain = self.lodge("config", "--explain", env=env)
        self.assertIn(f"used     instance metadata (IMDS): role lodge-instance at {fake.endpoint} (IMDSv2)",
                      explain.out)

    def test_an_instance_metadata_service_that_never_answers_does_not_hang_lodge(self):
        fake = MetadataFake(hang=True)
        self.addCleanup(fake.stop)
        env = {"AWS_EC2_METADATA_DISABLED": "", "AWS_EC2_METADATA_SERVICE_ENDPOINT": fake.endpoint,
               "AWS_ENDPOINT_URL": self.at("x")}
        started = time.monotonic()
        r = self.lodge("init", env=env, timeout=60)
        elapsed = time.monotonic() - started
        self.assertEqual(r.rc, 2, r)
        self.assertIn("no S3 credentials", r.err)
        self.assertLess(elapsed, 15, "one attempt of one second, not curl's unbounded wait")
        explain = self.lodge("config", "--explain", env=env)
        self.assertIn(f"not used instance metadata (IMDS): not reachable at {fake.endpoint}", explain.out)
        self.assertEqual(self.proxy.requests(), [])

    def test_profile_flag_takes_the_profile_keys_over_the_environment_as_aws_profile_does(self):
        self.aws_files(credentials="[b]\naws_access_key_id = AKIDB\naws_secret_access_key = k\n")
        env = {"AWS_ACCESS_KEY_ID": "AKIDENV", "AWS_SECRET_ACCESS_KEY": "s", "AWS_ENDPOINT_URL": self.at("b"),
               "AWS_REGION": "eu-west-2"}
        self.run_lodge("--profile", "b", env=env)
        self.assert_sent("b.localhost", "AKIDB", "eu-west-2")
        self.proxy.clear()
        r = self.lodge("--json", "upload", self.write("other.txt", "x"), env=dict(env, AWS_PROFILE="b"))
        self.assertEqual(r.rc, 0, r)
        self.assertEqual({x.key_id for x in self.proxy.requests()}, {"AKIDENV"})  # AWS_PROFILE does not

    # --- lodge config ---

    def test_config_shows_each_value_with_its_source_and_masks_secrets(self):
        self.aws_files(config=("[profile p]\nregion = eu-north-1\nca_bundle = /etc/ssl/certs/ca-certificates.crt\n"
                               "s3 =\n  addressing_style = path\n"),
                       credentials="[p]\naws_access_key_id = AKIAEXAMPLEXYZ1\naws_secret_access_key = TOPSECRET\n")
        env = {"AWS_PROFILE": "p", "AWS_ENDPOINT_URL": self.at("x")}
        r = self.lodge("--json", "config", env=env)
        self.assertEqual(r.rc, 0, r)
        j = r.json()
        cfgfile, credfile = f"{self.dir}/.aws/config", f"{self.dir}/.aws/credentials"
        self.assertEqual(j["s3"]["endpoint"], {"value": self.at("x"), "source": "env AWS_ENDPOINT_URL"})
        self.assertEqual(j["s3"]["region"], {"value": "eu-north-1", "source": f"file {cfgfile} [profile p]"})
        self.assertEqual(j["s3"]["addressing_style"],
                         {"value": "path", "source": f"file {cfgfile} [profile p] s3.addressing_style"})
        self.assertEqual(j["s3"]["ca_bundle"]["source"], f"file {cfgfile} [profile p]")
        self.assertEqual(j["s3"]["profile"], {"value": "p", "source": "env AWS_PROFILE"})
        self.assertEqual(j["s3"]["max_attempts"], {"value": 4, "source": "default"})
        self.assertEqual(j["credentials"]["source"], f"file {credfile} [p]")
        self.assertEqual(j["credentials"]["access_key_id"], "AKIA\u2026XYZ1")
        text = self.lodge("config", env=env)
        self.assertEqual(text.rc, 0, text)
        self.assertRegex(text.out, r"region +eu-north-1  \(file .*/\.aws/config \[profile p\]\)")
        self.assertIn("access key id AKIA\u2026XYZ1", text.out)
        for r2 in (r, text):
            self.assertNotIn("TOPSECRET", r2.out + r2.err)
            self.assertNotIn("AKIAEXAMPLEXYZ1", r2.out + r2.err)

    def test_config_explain_walks_the_chain(self):
        self.aws_files(config="[profile ci]\naws_access_key_id = AKIDCONFIGKEY\naws_secret_access_key = k\n",
                       credentials="[default]\naws_access_key_id = AKIDDEF\naws_secret_access_key = k\n")
        env = {"AWS_PROFILE": "ci", "AWS_ENDPOINT_URL": self.at("x")}
        r = self.lodge("config", "--explain", env=env)
        self.assertEqual(r.rc, 0, r)
        credfile, cfgfile = f"{self.dir}/.aws/credentials", f"{self.dir}/.aws/config"
        self.assertEqual(r.out.splitlines(), [
            "not used environment: AWS_ACCESS_KEY_ID not set",
            "not used web identity: AWS_WEB_IDENTITY_TOKEN_FILE not set",
            f"not used shared credentials file {credfile} [ci]: no profile section for it",
            f"used     shared config file {cfgfile} [profile ci]: static keys in [profile ci]",
        ])
        j = self.lodge("--json", "config", "--explain", env=env).json()
        self.assertEqual([s["used"] for s in j["credential_chain"]], [False, False, False, True])
        self.assertEqual(j["credentials"]["source"], f"file {cfgfile} [profile ci]")
        none = self.lodge("config", "--explain", env={"AWS_PROFILE": "", "AWS_ENDPOINT_URL": self.at("x"),
                                                       "AWS_SHARED_CREDENTIALS_FILE": self.dir + "/none"})
        self.assertIn(f"not used shared credentials file {self.dir}/none [default]: no such file", none.out)
        self.assertIn("not used container credentials: AWS_CONTAINER_CREDENTIALS_RELATIVE_URI and _FULL_URI not set",
                      none.out)
        self.assertIn("not used instance metadata (IMDS): disabled by AWS_EC2_METADATA_DISABLED", none.out)
        self.assertIn("no credentials: no S3 credentials", none.out)

    def test_the_man_page_environment_section_names_every_aws_variable_lodge_reads(self):
        root = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..")
        read = set()
        for base, _, files in os.walk(os.path.join(root, "src")):
            for name in files:
                with open(os.path.join(base, name), errors="replace") as f:
                    read |= set(re.findall(r'"(AWS_[A-Z0-9_]+)', f.read()))
        self.assertIn("AWS_EC2_METADATA_DISABLED", read)
        with open(os.path.join(root, "man", "lodge.1")) as f:
            man = f.read()
        section = man[man.index("\n.SH ENVIRONMENT"):]
        section = section[:section.index("\n.SH ", 1)]
        self.assertEqual(sorted(v for v in read if v not in section), [])

    def test_malformed_aws_config_is_a_config_error_naming_file_and_line(self):
        self.aws_files(config="[default]\nregion = eu-west-1\nthis line is wrong\n")
        r = self.lodge("--endpoint", self.at("flag"), "init", env={"AWS_ACCESS_KEY_ID": "A", "AWS_SECRET_ACCESS_KEY": "B"})
        self.assertEqual(r.rc, 2, r)
        self.assertIn(f"{self.dir}/.aws/config:3: expected [section], 'name = value' or a comment", r.err)
        self.assertEqual(self.proxy.requests(), [])

    def test_file_store_ignores_the_aws_files(self):
        self.aws_files(config="[default]\nthis line is wrong\n")
        r = self.lodge("--store", "file://" + self.dir + "/store", "init", env={"AWS_PROFILE": "missing"})
        self.assertEqual(r.rc, 0, r)


if __name__ == "__main__":
    main()
