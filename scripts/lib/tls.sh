# Shared by scripts/kafka.sh and scripts/cassandra.sh --secure: the test
# PKI of the secured servers, made once into <repo>/.tls/ (git-ignored) and
# kept; a file that goes missing makes the whole set be made again.
# Sourced, not run, after scripts/lib/jvm-node.sh (it uses say/die). Needs
# the JDK's keytool and the openssl CLI.
#
#   tls_ensure    makes the set unless complete; sets TLS_DIR and
#                 TLS_PASSWORD (the password of every .p12 file)
#
# The files (certificates RSA 2048, valid 3650 days, keys and keystores
# mode 600):
#   ca.pem             the test CA (CN=strata test CA), PEM
#   ca.p12             its key and certificate (signs the two below)
#   server.p12         PKCS12 keystore: the server key and certificate
#                      (CN=localhost, SAN IP:127.0.0.1,DNS:localhost,
#                      serverAuth) with its chain; the CA as trusted entry
#   server.pem         the server certificate alone, PEM
#   truststore.p12     PKCS12 truststore holding ca.pem (Cassandra)
#   client.pem         client certificate CN=strata-client (clientAuth), PEM
#   client.key         its private key, unencrypted PKCS#8 PEM
#   client.p12         the same two in a PKCS12 keystore
#   other-ca.pem       an unrelated CA (CN=strata other CA): nothing it is
#                      trusted by, for "untrusted CA" tests
#   store-password     the password of the .p12 files (a fixed test value)

TLS_DIR="$ROOT/.tls"
TLS_PASSWORD=strata-test-store-2Kp7
TLS_DAYS=3650
TLS_FILES="ca.pem ca.p12 server.p12 server.pem truststore.p12 client.pem client.key client.p12 other-ca.pem store-password"

tls_complete() {
  local f
  for f in $TLS_FILES; do
    [ -s "$TLS_DIR/$f" ] || return 1
  done
  [ "$(cat "$TLS_DIR/store-password")" = "$TLS_PASSWORD" ]
}

# keytool with the store password on every keystore it opens.
tls_keytool() {
  keytool "$@" -storepass "$TLS_PASSWORD"
}

# A key pair in keystore $1 (alias $2, subject $3, extra -ext flags after).
tls_keypair() {
  local store="$1" alias="$2" dname="$3"
  shift 3
  tls_keytool -genkeypair -keystore "$store" -storetype PKCS12 -alias "$alias" \
    -dname "$dname" -keyalg RSA -keysize 2048 -validity "$TLS_DAYS" "$@"
}

# Signs the key of keystore $1 (alias $2) with the CA, writes the PEM
# certificate $3 and installs it (with the CA) in the keystore. Extra
# -ext flags after.
tls_sign() {
  local store="$1" alias="$2" pem="$3"
  shift 3
  tls_keytool -certreq -keystore "$store" -alias "$alias" -file "$store.csr"
  tls_keytool -gencert -keystore ca.p12 -alias ca -infile "$store.csr" -outfile "$pem" \
    -rfc -validity "$TLS_DAYS" "$@"
  tls_keytool -importcert -noprompt -keystore "$store" -alias ca -file ca.pem
  tls_keytool -importcert -noprompt -keystore "$store" -alias "$alias" -file "$pem"
  rm -f "$store.csr"
}

# Makes the whole set in the current (empty) folder.
tls_generate() {
  tls_keypair ca.p12 ca "CN=strata test CA,O=strata" -ext bc:c -ext KU=keyCertSign,cRLSign
  tls_keytool -exportcert -rfc -keystore ca.p12 -alias ca -file ca.pem

  tls_keypair server.p12 server "CN=localhost,O=strata"
  tls_sign server.p12 server server.pem -ext SAN=IP:127.0.0.1,DNS:localhost \
    -ext KU=digitalSignature,keyEncipherment -ext EKU=serverAuth
  tls_keytool -importcert -noprompt -keystore truststore.p12 -storetype PKCS12 \
    -alias ca -file ca.pem

  tls_keypair client.p12 client "CN=strata-client,O=strata"
  tls_sign client.p12 client client.pem \
    -ext KU=digitalSignature,keyEncipherment -ext EKU=clientAuth
  openssl pkcs12 -in client.p12 -passin "pass:$TLS_PASSWORD" -nodes -nocerts \
    | openssl pkey -out client.key

  tls_keypair other-ca.p12 ca "CN=strata other CA,O=strata" -ext bc:c -ext KU=keyCertSign,cRLSign
  tls_keytool -exportcert -rfc -keystore other-ca.p12 -alias ca -file other-ca.pem
  rm -f other-ca.p12

  printf '%s\n' "$TLS_PASSWORD" >store-password
  openssl verify -CAfile ca.pem server.pem client.pem
}

tls_ensure() {
  local fd new f
  command -v keytool >/dev/null || die "keytool (JDK) not found: needed for the test certificates"
  command -v openssl >/dev/null || die "openssl not found: needed for the test certificates"
  mkdir -p "$TLS_DIR"
  # Kafka and Cassandra start in parallel (scripts/test.sh): one makes the set.
  exec {fd}>"$TLS_DIR/.lock"
  flock "$fd"
  if ! tls_complete; then
    say "making the test CA and certificates in $TLS_DIR (once)"
    new="$TLS_DIR/new.$$"
    rm -rf "$TLS_DIR"/new.*
    mkdir -m 700 "$new"
    # In the background so that set -e holds inside (in an `if` it would not).
    (cd "$new"; umask 077; tls_generate) >"$TLS_DIR/generate.log" 2>&1 &
    if ! wait $!; then
      cat "$TLS_DIR/generate.log" >&2
      rm -rf "$new"
      exec {fd}>&-
      die "making the test certificates failed"
    fi
    chmod 644 "$new"/*.pem
    for f in $TLS_FILES; do mv -f "$new/$f" "$TLS_DIR/$f"; done
    rm -rf "$new" "$TLS_DIR/generate.log"
  fi
  exec {fd}>&-
}
