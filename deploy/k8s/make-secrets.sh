#!/usr/bin/env bash
# Makes what the manifests' two secrets hold, with openssl, into DIR:
#   DIR/sluice-tls/   ca.crt, tls.crt, tls.key   (a CA, and a certificate it signs
#                     for the DNS name `sluice`: every server of the deployment
#                     presents it, every client verifies `sluice` with
#                     --tls-server-name, since workers advertise pod IPs)
#   DIR/sluice-auth/  tokens (the servers' token file: client, worker and metrics
#                     tokens), peer-secret, worker-token
#   DIR/client-token, DIR/metrics-token   (for trainers and for Prometheus)
#   DIR/ca.key        keep it offline; it signs new certificates
# and prints the kubectl commands that create the secrets. Usage:
#   deploy/k8s/make-secrets.sh DIR
# tests/deploy.rs runs it and deploys what it makes.
set -euo pipefail
dir="${1:?usage: make-secrets.sh DIR}"
mkdir -p "$dir/sluice-tls" "$dir/sluice-auth"
cd "$dir"
ec=(-newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes)
openssl req -x509 "${ec[@]}" -subj "/CN=sluice CA" -days 825 \
    -addext "basicConstraints=critical,CA:TRUE" -addext "keyUsage=critical,keyCertSign" \
    -keyout ca.key -out sluice-tls/ca.crt 2>/dev/null
openssl req "${ec[@]}" -subj "/CN=sluice" -keyout sluice-tls/tls.key -out tls.csr 2>/dev/null
printf 'subjectAltName=DNS:sluice\nbasicConstraints=CA:FALSE\nkeyUsage=digitalSignature\nextendedKeyUsage=serverAuth,clientAuth\n' > ext.cnf
openssl x509 -req -in tls.csr -CA sluice-tls/ca.crt -CAkey ca.key -CAcreateserial -days 825 \
    -extfile ext.cnf -out sluice-tls/tls.crt 2>/dev/null
rm -f tls.csr ext.cnf sluice-tls/ca.srl
token() { openssl rand -hex 24; }
client=$(token) worker=$(token) metrics=$(token)
printf '# role name secret\nclient trainer %s\nworker pool %s\nmetrics prometheus %s\n' \
    "$client" "$worker" "$metrics" > sluice-auth/tokens
token > sluice-auth/peer-secret
echo "$worker" > sluice-auth/worker-token
echo "$client" > client-token
echo "$metrics" > metrics-token
chmod 600 ca.key sluice-tls/tls.key sluice-auth/* client-token metrics-token
cat <<EOT
kubectl create secret generic sluice-tls --from-file=$PWD/sluice-tls
kubectl create secret generic sluice-auth --from-file=$PWD/sluice-auth
EOT
