// Package auth authenticates callers of ctrl's endpoints with bearer API keys.
//
// Every key has one scope. The Native Workspace endpoint accepts keys of scope
// "workspace", the Operator endpoint keys of scope "operator"; a key of the
// other scope is permission_denied, a missing or unknown key unauthenticated.
// Keys are stored only as SHA-256 hashes; the plaintext is shown once, when it
// is made.
package auth

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"connectrpc.com/connect"

	ctrlv1 "github.com/kibotos/kibotos/gen/kibotos/ctrl/v1"
)

// Scope is what a key may call.
type Scope string

const (
	ScopeWorkspace Scope = "workspace"
	ScopeOperator  Scope = "operator"
)

// tokenPrefix makes keys recognisable in logs and secret scanners.
const tokenPrefix = "kbt_"

// Key is one stored API key.
type Key struct {
	Scope Scope  `json:"scope"`
	Hash  string `json:"sha256"`
}

// Keyring is the set of keys ctrl accepts.
type Keyring struct {
	Keys []Key `json:"keys"`
}

// NewToken makes a random bearer token.
func NewToken() (string, error) {
	b := make([]byte, 32)
	if _, err := rand.Read(b); err != nil {
		return "", err
	}
	return tokenPrefix + hex.EncodeToString(b), nil
}

// HashToken is the stored form of a token.
func HashToken(token string) string {
	sum := sha256.Sum256([]byte(token))
	return hex.EncodeToString(sum[:])
}

// Add records token with scope.
func (k *Keyring) Add(scope Scope, token string) {
	k.Keys = append(k.Keys, Key{Scope: scope, Hash: HashToken(token)})
}

// lookup returns the scope of token, or false.
func (k *Keyring) lookup(token string) (Scope, bool) {
	h := HashToken(token)
	for _, key := range k.Keys {
		if subtle.ConstantTimeCompare([]byte(key.Hash), []byte(h)) == 1 {
			return key.Scope, true
		}
	}
	return "", false
}

// LoadKeyring reads a keyring file; a missing file is an empty keyring.
func LoadKeyring(path string) (*Keyring, error) {
	data, err := os.ReadFile(path)
	if errors.Is(err, os.ErrNotExist) {
		return &Keyring{}, nil
	}
	if err != nil {
		return nil, err
	}
	var k Keyring
	if err := json.Unmarshal(data, &k); err != nil {
		return nil, fmt.Errorf("keyring %s: %w", path, err)
	}
	return &k, nil
}

// Save writes the keyring atomically, readable by its owner only.
func (k *Keyring) Save(path string) error {
	data, err := json.MarshalIndent(k, "", "  ")
	if err != nil {
		return err
	}
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		return err
	}
	tmp := path + ".tmp"
	// A temporary file an interrupted Save left keeps its mode through
	// WriteFile: start from none.
	_ = os.Remove(tmp)
	if err := os.WriteFile(tmp, data, 0o600); err != nil {
		return err
	}
	return os.Rename(tmp, path)
}

// MakePrivate takes the group's and others' permissions off the file at
// path (0644 becomes 0600), if it exists.
func MakePrivate(path string) error {
	st, err := os.Stat(path)
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if err != nil {
		return err
	}
	if perm := st.Mode().Perm(); perm&0o077 != 0 {
		return os.Chmod(path, perm&^0o077)
	}
	return nil
}

// Has reports whether token is a key of scope.
func (k *Keyring) Has(scope Scope, token string) bool {
	got, ok := k.lookup(token)
	return ok && got == scope
}

// NewInterceptor admits only callers presenting a key of scope.
func NewInterceptor(keys *Keyring, scope Scope) connect.Interceptor {
	return &interceptor{keys: keys, scope: scope}
}

type interceptor struct {
	keys  *Keyring
	scope Scope
}

func (i *interceptor) check(header interface{ Get(string) string }) error {
	raw := header.Get("Authorization")
	token, ok := strings.CutPrefix(raw, "Bearer ")
	if !ok || token == "" {
		return denied(connect.CodeUnauthenticated, ctrlv1.FailureReason_FAILURE_REASON_UNAUTHENTICATED,
			"missing bearer token: send Authorization: Bearer <key>")
	}
	scope, known := i.keys.lookup(token)
	if !known {
		return denied(connect.CodeUnauthenticated, ctrlv1.FailureReason_FAILURE_REASON_UNAUTHENTICATED, "unknown API key")
	}
	if scope != i.scope {
		return denied(connect.CodePermissionDenied, ctrlv1.FailureReason_FAILURE_REASON_PERMISSION_DENIED,
			fmt.Sprintf("an API key of scope %q cannot call this endpoint, which needs scope %q", scope, i.scope))
	}
	return nil
}

func denied(code connect.Code, reason ctrlv1.FailureReason, msg string) error {
	err := connect.NewError(code, errors.New(msg))
	if detail, derr := connect.NewErrorDetail(&ctrlv1.ErrorDetail{Reason: reason}); derr == nil {
		err.AddDetail(detail)
	}
	return err
}

func (i *interceptor) WrapUnary(next connect.UnaryFunc) connect.UnaryFunc {
	return func(ctx context.Context, req connect.AnyRequest) (connect.AnyResponse, error) {
		if err := i.check(req.Header()); err != nil {
			return nil, err
		}
		return next(ctx, req)
	}
}

func (i *interceptor) WrapStreamingClient(next connect.StreamingClientFunc) connect.StreamingClientFunc {
	return next
}

func (i *interceptor) WrapStreamingHandler(next connect.StreamingHandlerFunc) connect.StreamingHandlerFunc {
	return func(ctx context.Context, conn connect.StreamingHandlerConn) error {
		if err := i.check(conn.RequestHeader()); err != nil {
			return err
		}
		return next(ctx, conn)
	}
}

// Bearer is the client side: it sends token as the bearer key of every
// call, unary and streaming. An empty token sends nothing.
func Bearer(token string) connect.Interceptor { return bearer(token) }

type bearer string

func (b bearer) WrapUnary(next connect.UnaryFunc) connect.UnaryFunc {
	return func(ctx context.Context, req connect.AnyRequest) (connect.AnyResponse, error) {
		if b != "" {
			req.Header().Set("Authorization", "Bearer "+string(b))
		}
		return next(ctx, req)
	}
}

func (b bearer) WrapStreamingClient(next connect.StreamingClientFunc) connect.StreamingClientFunc {
	return func(ctx context.Context, spec connect.Spec) connect.StreamingClientConn {
		conn := next(ctx, spec)
		if b != "" {
			conn.RequestHeader().Set("Authorization", "Bearer "+string(b))
		}
		return conn
	}
}

func (b bearer) WrapStreamingHandler(next connect.StreamingHandlerFunc) connect.StreamingHandlerFunc {
	return next
}
