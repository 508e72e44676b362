"""The object-store contract suite (tests/store) against a real moto_server on loopback,
through the fault-injecting proxy, and against a moto that checks signatures."""

import os
import subprocess
import sys
import tempfile
import unittest

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "harness"))
from lodgetest import FaultProxy, Moto, S3TestCase, aws, main  # noqa: E402

STORE_TESTS = os.environ.get("LODGE_STORE_TESTS_BIN", "")


def run_suite(suites, extra_env):
    env = dict(os.environ)
    env.update(extra_env)
    return subprocess.run([STORE_TESTS, "-ts=" + suites], capture_output=True, text=True, env=env, timeout=600)


class StoreAgainstMoto(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.moto = Moto()
        cls.tmp = tempfile.mkdtemp(prefix="lodge-proxy-")
        cls.proxy = FaultProxy(cls.moto.port, cls.tmp)

    @classmethod
    def tearDownClass(cls):
        cls.proxy.stop()
        cls.moto.stop()

    def test_contract_suite_passes_against_moto(self):
        p = run_suite("contract,s3only", {"LODGE_TEST_STORE": "s3", "LODGE_TEST_S3_ENDPOINT": self.moto.endpoint})
        self.assertEqual(p.returncode, 0, p.stdout + p.stderr)
        self.assertIn("Status: SUCCESS", p.stdout)
        self.assertRegex(p.stdout, r"test cases:\s+2[0-9] \|\s+2[0-9] passed")

    def test_fault_suite_passes_through_the_proxy(self):
        p = run_suite("faults", {
            "LODGE_TEST_STORE": "s3", "LODGE_TEST_S3_ENDPOINT": self.moto.endpoint,
            "LODGE_TEST_PROXY_ENDPOINT": self.proxy.endpoint, "LODGE_TEST_PROXY_RULES": self.proxy.rules,
            "LODGE_TEST_PROXY_LOG": self.proxy.log})
        self.assertEqual(p.returncode, 0, p.stdout + p.stderr)
        self.assertIn("test cases: 4 | 4 passed", " ".join(p.stdout.split()))


class TlsVerification(S3TestCase):
    """lodge against HTTPS (a TLS-terminating proxy with a self-signed certificate in
    front of moto): verification is on unless explicitly turned off."""

    def test_tls_is_verified_unless_told_otherwise(self):
        cert, key = os.path.join(self.dir, "cert.pem"), os.path.join(self.dir, "key.pem")
        subprocess.run(["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1", "-subj",
                        "/CN=127.0.0.1", "-addext", "subjectAltName=IP:127.0.0.1", "-keyout", key, "-out", cert],
                       check=True, capture_output=True)
        proxy = FaultProxy(self.moto.port, self.dir, tls=(cert, key))
        try:
            self.env["AWS_ENDPOINT_URL"] = proxy.endpoint
            self.env.pop("AWS_CA_BUNDLE", None)
            self.rebind({})  # the same bucket, now reached through the TLS proxy
            f = self.write("a.txt", "over TLS\n")
            r = self.lodge("upload", "--json", f)
            self.assertEqual(r.rc, 4, r)
            self.assertEqual(r.json_lines()[0]["error"]["code"], "STORAGE_UNAVAILABLE")
            self.assertIn("certificate", r.json_lines()[0]["error"]["message"].lower())
            self.assertEqual(self.lodge("upload", "--json", "--ca-bundle", cert, f).rc, 0)
            g = self.write("b.txt", "over TLS via AWS_CA_BUNDLE\n")
            self.assertEqual(self.lodge("upload", g, env={"AWS_CA_BUNDLE": cert}).rc, 0)
            h = self.write("c.txt", "unverified, as asked\n")
            self.assertEqual(self.lodge("--no-verify-ssl", "upload", h).rc, 0)
            self.assertEqual(len(self.objects()), 3)
        finally:
            proxy.stop()


class VerifyThroughACutOffGet(S3TestCase):
    def test_reconcile_verify_reads_a_cut_off_object_back_clean(self):
        data = bytes((i * 131) % 251 for i in range(400_000))
        up = self.lodge("upload", "--json", self.write("big.bin", data))
        self.assertEqual(up.rc, 0, up)
        key = up.json_lines()[0]["object_key"]
        proxy = FaultProxy(self.moto.port, self.dir)
        try:
            proxy.set_rules([{"method": "GET", "path_contains": key, "action": "cut_body", "bytes": 150_000,
                              "times": 1}])
            self.rebind({"AWS_ENDPOINT_URL": proxy.endpoint})  # the same bucket, through the proxy
            rec = self.lodge("-v", "reconcile", "--verify", "--json", env={"AWS_ENDPOINT_URL": proxy.endpoint})
            self.assertEqual(rec.rc, 0, rec)
            self.assertTrue(rec.json()["clean"], rec)
            self.assertEqual(rec.json()["found"]["corrupt"], 0, rec)
            gets = [e for e in proxy.entries() if e["method"] == "GET" and key in e["path"]]
            self.assertEqual([e["action"] for e in gets], ["cut_body", "forward"], gets)
            self.assertEqual(gets[1].get("range"), "bytes=150000-", gets)
        finally:
            proxy.stop()


class StoreAgainstSignatureCheckingMoto(unittest.TestCase):
    def test_wrong_secret_is_rejected(self):
        # Four free actions set up a user with a key and a bucket; from then on moto
        # checks every signature.
        moto = Moto({"INITIAL_NO_AUTH_ACTION_COUNT": "4"})
        try:
            aws(moto.endpoint, "iam", "create-user", "--user-name", "lodge")
            key = aws(moto.endpoint, "iam", "create-access-key", "--user-name", "lodge")["AccessKey"]
            aws(moto.endpoint, "iam", "put-user-policy", "--user-name", "lodge", "--policy-name", "all",
                "--policy-document",
                '{"Version":"2012-10-17","Statement":[{"Effect":"Allow","Action":"s3:*","Resource":"*"}]}')
            env = dict(os.environ, AWS_ACCESS_KEY_ID=key["AccessKeyId"], AWS_SECRET_ACCESS_KEY=key["SecretAccessKey"],
                       AWS_DEFAULT_REGION="us-east-1")
            subprocess.run(["aws", "--endpoint-url", moto.endpoint, "s3api", "create-bucket", "--bucket", "signed"],
                           check=True, capture_output=True, env=env)
            p = run_suite("auth", {
                "LODGE_TEST_AUTH_ENDPOINT": moto.endpoint, "LODGE_TEST_AUTH_BUCKET": "signed",
                "LODGE_TEST_AUTH_KEY_ID": key["AccessKeyId"], "LODGE_TEST_AUTH_SECRET": key["SecretAccessKey"]})
            self.assertEqual(p.returncode, 0, p.stdout + p.stderr)
            self.assertIn("test cases: 1 | 1 passed", " ".join(p.stdout.split()))
        finally:
            moto.stop()


if __name__ == "__main__":
    main()
