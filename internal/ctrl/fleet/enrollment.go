package fleet

import (
	"context"
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"regexp"
	"time"
	"unicode/utf8"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/types/known/timestamppb"

	ctrlv1 "github.com/kibotos/kibotos/gen/kibotos/ctrl/v1"
	nodev1 "github.com/kibotos/kibotos/gen/kibotos/node/v1"
	operatorv1 "github.com/kibotos/kibotos/gen/kibotos/operator/v1"
	"github.com/kibotos/kibotos/internal/ctrl/apierr"
	"github.com/kibotos/kibotos/internal/ctrl/command"
	"github.com/kibotos/kibotos/internal/ctrl/page"
	"github.com/kibotos/kibotos/internal/store"
)

var nodeIDPattern = regexp.MustCompile(`^[a-z]([-a-z0-9]{0,61}[a-z0-9])?$`)

// ValidateNodeID checks a node_id: 1 to 63 characters of lowercase ASCII
// letters, digits and '-', starting with a letter, not ending with '-'.
func ValidateNodeID(field, id string) error {
	if !nodeIDPattern.MatchString(id) {
		return apierr.Invalid(field, "must be 1 to 63 characters of a-z, 0-9 and '-', starting with a letter and not ending with '-'")
	}
	return nil
}

const (
	defaultGrantTTL = 24 * time.Hour
	minGrantTTL     = time.Minute
	maxGrantTTL     = 30 * 24 * time.Hour
)

func hashSecret(secret string) string {
	sum := sha256.Sum256([]byte(secret))
	return hex.EncodeToString(sum[:])
}

// grantSecret derives a grant's secret from the deployment's grant key, so a
// replay of CreateEnrollmentGrant can answer the same secret while ctrl
// stores only its hash.
func (f *Fleet) grantSecret(tx *store.Tx, grantID string) (string, error) {
	key := make([]byte, 32)
	if _, err := rand.Read(key); err != nil {
		return "", err
	}
	key, err := tx.InitSetting("enrollment-grant-key", key)
	if err != nil {
		return "", err
	}
	mac := hmac.New(sha256.New, key)
	mac.Write([]byte(grantID))
	return "kbg_" + hex.EncodeToString(mac.Sum(nil)), nil
}

// putGrant writes a grant that exists, with the hash of its secret.
func (f *Fleet) putGrant(tx *store.Tx, g *operatorv1.EnrollmentGrant) error {
	secret, err := f.grantSecret(tx, g.GetGrantId())
	if err != nil {
		return err
	}
	return tx.PutGrant(g, hashSecret(secret))
}

func randomID(prefix string) string {
	b := make([]byte, 8)
	_, _ = rand.Read(b)
	return prefix + hex.EncodeToString(b)
}

// grantView is a grant as read at now: an ACTIVE grant past its expiry is
// EXPIRED.
func grantView(g *operatorv1.EnrollmentGrant, now time.Time) *operatorv1.EnrollmentGrant {
	if g.GetState() == operatorv1.EnrollmentGrantState_ENROLLMENT_GRANT_STATE_ACTIVE && !now.Before(g.GetExpiresAt().AsTime()) {
		g.State = operatorv1.EnrollmentGrantState_ENROLLMENT_GRANT_STATE_EXPIRED
	}
	return g
}

// CreateEnrollmentGrant admits a new grant and answers its secret.
func (f *Fleet) CreateEnrollmentGrant(ctx context.Context, req *operatorv1.CreateEnrollmentGrantRequest) (*operatorv1.CreateEnrollmentGrantResponse, error) {
	if err := command.ValidateID("command.command_id", req.GetCommand()); err != nil {
		return nil, err
	}
	if req.GetNodeId() != "" {
		if err := ValidateNodeID("node_id", req.GetNodeId()); err != nil {
			return nil, err
		}
	}
	ttl := defaultGrantTTL
	if req.Ttl != nil {
		ttl = req.GetTtl().AsDuration()
		if ttl < minGrantTTL || ttl > maxGrantTTL {
			return nil, apierr.Invalid("ttl", "must be between 1 minute and 30 days")
		}
	}
	if len(req.GetDescription()) > 1024 || !utf8.ValidString(req.GetDescription()) {
		return nil, apierr.Invalid("description", "must be at most 1024 bytes of UTF-8")
	}
	var res *operatorv1.CreateEnrollmentGrantResponse
	err := command.Do(ctx, f.store, func(tx *store.Tx) error {
		now := f.now()
		if req.GetNodeId() != "" {
			if n, err := tx.GetNode(req.GetNodeId(), false); err == nil && n.GetAdmission() == operatorv1.NodeAdmission_NODE_ADMISSION_RETIRED {
				return apierr.Precondition(nil, "node %q is retired; a new host takes a new node_id", req.GetNodeId())
			}
		}
		out, err := command.Admit(tx, now, req.GetCommand().GetCommandId(), "CreateEnrollmentGrant", req, func() (command.Effect, error) {
			g := &operatorv1.EnrollmentGrant{
				GrantId: randomID("grant-"), State: operatorv1.EnrollmentGrantState_ENROLLMENT_GRANT_STATE_ACTIVE,
				NodeId: req.GetNodeId(), Reusable: req.GetReusable(), Description: req.GetDescription(),
				CreatedAt: timestamppb.New(now), ExpiresAt: timestamppb.New(now.Add(ttl)),
			}
			secret, err := f.grantSecret(tx, g.GetGrantId())
			if err != nil {
				return command.Effect{}, err
			}
			// The recorded result never holds the secret; it is derived again.
			return command.Effect{Target: g.GetGrantId(), Result: &operatorv1.CreateEnrollmentGrantResponse{Grant: g}}, tx.PutGrant(g, hashSecret(secret))
		})
		if err != nil {
			return err
		}
		res = out.(*operatorv1.CreateEnrollmentGrantResponse)
		res.Secret, err = f.grantSecret(tx, res.GetGrant().GetGrantId())
		return err
	})
	return res, err
}

// GetEnrollmentGrant reads one grant.
func (f *Fleet) GetEnrollmentGrant(ctx context.Context, req *operatorv1.GetEnrollmentGrantRequest) (*operatorv1.GetEnrollmentGrantResponse, error) {
	var g *operatorv1.EnrollmentGrant
	err := f.store.Tx(ctx, func(tx *store.Tx) error {
		var err error
		g, err = tx.GetGrant(req.GetGrantId(), false)
		if errors.Is(err, store.ErrNotFound) {
			return apierr.NotFound("enrollment grant", req.GetGrantId())
		}
		return err
	})
	if err != nil {
		return nil, err
	}
	return &operatorv1.GetEnrollmentGrantResponse{Grant: grantView(g, f.now())}, nil
}

// ListEnrollmentGrants pages grants by grant_id.
func (f *Fleet) ListEnrollmentGrants(ctx context.Context, req *operatorv1.ListEnrollmentGrantsRequest) (*operatorv1.ListEnrollmentGrantsResponse, error) {
	filter := req.GetNodeId() + "|" + map[bool]string{true: "all", false: "active"}[req.GetIncludeInactive()]
	after, err := page.After(req.GetPageToken(), filter)
	if err != nil {
		return nil, err
	}
	now := f.now()
	res := &operatorv1.ListEnrollmentGrantsResponse{}
	err = f.store.Tx(ctx, func(tx *store.Tx) error {
		var err error
		res.Grants, res.NextPageToken, err = page.Collect(page.Size(req.GetPageSize()), after, filter,
			func(g *operatorv1.EnrollmentGrant) string { return g.GetGrantId() },
			func(g *operatorv1.EnrollmentGrant) bool {
				grantView(g, now)
				return (req.GetNodeId() == "" || g.GetNodeId() == req.GetNodeId()) &&
					(req.GetIncludeInactive() || g.GetState() == operatorv1.EnrollmentGrantState_ENROLLMENT_GRANT_STATE_ACTIVE)
			}, tx.ListGrants)
		return err
	})
	return res, err
}

// RevokeEnrollmentGrant revokes a grant; with revoke_enrolled_nodes also the
// admission of the nodes that enrolled with it.
func (f *Fleet) RevokeEnrollmentGrant(ctx context.Context, req *operatorv1.RevokeEnrollmentGrantRequest) (*operatorv1.RevokeEnrollmentGrantResponse, error) {
	if err := command.ValidateID("command.command_id", req.GetCommand()); err != nil {
		return nil, err
	}
	var res *operatorv1.RevokeEnrollmentGrantResponse
	err := command.Do(ctx, f.store, func(tx *store.Tx) error {
		now := f.now()
		out, err := command.Admit(tx, now, req.GetCommand().GetCommandId(), "RevokeEnrollmentGrant", req, func() (command.Effect, error) {
			g, err := tx.GetGrant(req.GetGrantId(), true)
			if errors.Is(err, store.ErrNotFound) {
				return command.Effect{}, apierr.NotFound("enrollment grant", req.GetGrantId())
			} else if err != nil {
				return command.Effect{}, err
			}
			grantView(g, now)
			if g.GetState() == operatorv1.EnrollmentGrantState_ENROLLMENT_GRANT_STATE_ACTIVE {
				g.State = operatorv1.EnrollmentGrantState_ENROLLMENT_GRANT_STATE_REVOKED
				g.RevokedAt = timestamppb.New(now)
			}
			if err := f.putGrant(tx, g); err != nil {
				return command.Effect{}, err
			}
			res := &operatorv1.RevokeEnrollmentGrantResponse{Grant: g}
			if req.GetRevokeEnrolledNodes() {
				for _, id := range g.GetEnrolledNodeIds() {
					n, err := tx.GetNode(id, true)
					if err != nil || n.GetAdmission() != operatorv1.NodeAdmission_NODE_ADMISSION_ADMITTED {
						continue
					}
					n.Admission = operatorv1.NodeAdmission_NODE_ADMISSION_REVOKED
					n.RegistrationVersion++
					n.UpdatedAt = timestamppb.New(now)
					if err := tx.PutNode(n); err != nil {
						return command.Effect{}, err
					}
					res.RevokedNodeIds = append(res.RevokedNodeIds, id)
				}
			}
			return command.Effect{Target: g.GetGrantId(), Result: res}, nil
		})
		if err == nil {
			res = out.(*operatorv1.RevokeEnrollmentGrantResponse)
		}
		return err
	})
	for _, id := range res.GetRevokedNodeIds() {
		f.endSession(id, denied("node "+id+" is revoked"))
	}
	return res, err
}

// Enroll exchanges a grant secret for a node credential.
func (f *Fleet) Enroll(ctx context.Context, req *nodev1.EnrollRequest) (*nodev1.EnrollResponse, error) {
	if err := ValidateNodeID("node_id", req.GetNodeId()); err != nil {
		return nil, err
	}
	credential := "kbn_" + hex.EncodeToString(randomBytes(32))
	var res *nodev1.EnrollResponse
	err := f.store.Tx(ctx, func(tx *store.Tx) error {
		now := f.now()
		g, err := tx.GrantBySecretHash(hashSecret(req.GetGrantSecret()), true)
		if errors.Is(err, store.ErrNotFound) {
			return denied("unknown enrollment grant")
		} else if err != nil {
			return err
		}
		grantView(g, now)
		if g.GetState() != operatorv1.EnrollmentGrantState_ENROLLMENT_GRANT_STATE_ACTIVE {
			return denied("the enrollment grant is " + g.GetState().String())
		}
		if g.GetNodeId() != "" && g.GetNodeId() != req.GetNodeId() {
			return denied("the enrollment grant is bound to another node_id")
		}
		n, err := tx.GetNode(req.GetNodeId(), true)
		switch {
		case errors.Is(err, store.ErrNotFound):
			n = &operatorv1.NodeRegistration{
				NodeId: req.GetNodeId(), Admission: operatorv1.NodeAdmission_NODE_ADMISSION_ADMITTED,
				Status: operatorv1.NodeRegistrationStatus_NODE_REGISTRATION_STATUS_UNAVAILABLE, RegisteredAt: timestamppb.New(now),
			}
		case err != nil:
			return err
		case n.GetAdmission() == operatorv1.NodeAdmission_NODE_ADMISSION_RETIRED:
			return denied("node " + req.GetNodeId() + " is retired; a new host takes a new node_id")
		case f.Live(n, now):
			return apierr.Precondition(nil, "node %s has a live control session", req.GetNodeId())
		}
		// A revoked node enrolling with a new grant is admitted again.
		n.Admission = operatorv1.NodeAdmission_NODE_ADMISSION_ADMITTED
		n.RegistrationVersion++
		n.UpdatedAt = timestamppb.New(now)
		if err := tx.PutNode(n); err != nil {
			return err
		}
		if err := tx.SetNodeCredential(n.GetNodeId(), hashSecret(credential)); err != nil {
			return err
		}
		if err := tx.AddGrantEnrollment(g.GetGrantId(), n.GetNodeId()); err != nil {
			return err
		}
		g.LastUsedAt = timestamppb.New(now)
		if !g.GetReusable() {
			g.State = operatorv1.EnrollmentGrantState_ENROLLMENT_GRANT_STATE_CONSUMED
		}
		if err := tx.PutGrant(g, hashSecret(req.GetGrantSecret())); err != nil {
			return err
		}
		res = &nodev1.EnrollResponse{NodeId: n.GetNodeId(), Credential: credential, IssuedAt: timestamppb.New(now)}
		return nil
	})
	if err == nil {
		f.log.InfoContext(ctx, "node enrolled", "node_id", req.GetNodeId())
	}
	return res, err
}

// notAdmitted refuses a session of a node that is not ADMITTED.
func notAdmitted(n *operatorv1.NodeRegistration) error {
	if n.GetAdmission() == operatorv1.NodeAdmission_NODE_ADMISSION_RETIRED {
		return denied("node " + n.GetNodeId() + " is retired; a new host takes a new node_id")
	}
	return denied(fmt.Sprintf("node %s is %s", n.GetNodeId(), n.GetAdmission()))
}

func denied(msg string) error {
	return apierr.New(connect.CodePermissionDenied, &ctrlv1.ErrorDetail{Reason: ctrlv1.FailureReason_FAILURE_REASON_PERMISSION_DENIED}, "%s", msg)
}

func randomBytes(n int) []byte {
	b := make([]byte, n)
	_, _ = rand.Read(b)
	return b
}
