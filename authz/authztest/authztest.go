// Package authztest holds the policy the authorization tests of authz and
// cluster share: three identities with bearer tokens, one named by a
// certificate, and one peer certificate. Only tests import it.
package authztest

// Bearer tokens of the identities of Policy.
const (
	AliceToken = "alice-token-0123456789"
	BobToken   = "bob-token-0123456789ab"
	RootToken  = "root-token-0123456789a"
)

// Policy: alice within a/, bob within b/ (resources and watches), root
// everywhere and admin, carol (by certificate URI SAN) resources within
// c/ only; the certificate "node-cert" is a peer.
const Policy = `{
  "identities": {
    "alice": {"tokens": ["` + AliceToken + `"], "resources": ["a/"], "watch": ["a/"]},
    "bob":   {"tokens": ["` + BobToken + `"], "resources": ["b/"], "watch": ["b/"]},
    "root":  {"tokens": ["` + RootToken + `"], "resources": [""], "watch": [""], "admin": true},
    "spiffe://example.org/carol": {"resources": ["c/"]}
  },
  "peers": ["node-cert"]
}`
