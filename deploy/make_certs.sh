#!/usr/bin/env bash
# Makes a private CA and the certificates a gradstream cluster needs for TLS
# and mutual TLS, plus a cluster token. For tests and small deployments; a
# real cluster would take certificates from its own CA the same way.
#
#   deploy/make_certs.sh OUT_DIR [NAME...]
#
# Writes into OUT_DIR (created, mode 0700):
#   ca.pem ca.key          the CA (keep ca.key away from the cluster)
#   node.pem node.key      every daemon (coordinator, shards, workers): valid
#                          for serverAuth and clientAuth, with subjectAltNames
#                          localhost, 127.0.0.1, ::1 and each NAME (the
#                          host names peers dial, e.g. coordinator shard0)
#   client.pem client.key  the CLI (clientAuth only)
#   auth_token             a random cluster token (--auth_token_file)
# Needs openssl. Existing files are replaced. EC P-256 keys, 825-day certs.
set -euo pipefail
[ $# -ge 1 ] || { echo "usage: $0 OUT_DIR [NAME...]" >&2; exit 2; }
OUT=$1
shift
command -v openssl >/dev/null || { echo "make_certs: openssl is not installed" >&2; exit 1; }
mkdir -p "$OUT"
chmod 700 "$OUT"
cd "$OUT"

san="DNS:localhost,IP:127.0.0.1,IP:::1"
for n in "$@"; do san="$san,DNS:$n"; done

key() { openssl genpkey -algorithm EC -pkeyopt ec_paramgen_curve:P-256 -out "$1" 2>/dev/null; }

key ca.key
openssl req -x509 -new -key ca.key -sha256 -days 825 -subj "/CN=gradstream test CA" \
  -addext "basicConstraints=critical,CA:TRUE" -addext "keyUsage=critical,keyCertSign,cRLSign" \
  -out ca.pem

sign() {  # sign NAME CN EXTENSIONS
  key "$1.key"
  openssl req -new -key "$1.key" -subj "/CN=$2" -out "$1.csr"
  printf '%b' "$3" >"$1.ext"
  openssl x509 -req -in "$1.csr" -CA ca.pem -CAkey ca.key -CAcreateserial -days 825 -sha256 \
    -extfile "$1.ext" -out "$1.pem" 2>/dev/null
  rm -f "$1.csr" "$1.ext"
}
sign node "gradstream node" \
  "basicConstraints=CA:FALSE\nkeyUsage=critical,digitalSignature\nextendedKeyUsage=serverAuth,clientAuth\nsubjectAltName=$san\n"
sign client "gradstream cli" \
  "basicConstraints=CA:FALSE\nkeyUsage=critical,digitalSignature\nextendedKeyUsage=clientAuth\n"
rm -f ca.srl
openssl rand -hex 16 >auth_token
chmod 600 ./*.key auth_token
chmod 644 ./*.pem
echo "make_certs: CA, node and client certificates and auth_token in $PWD (SANs: $san)"
