package labels

import (
	"cmp"
	"fmt"
	"slices"
	"strings"

	"github.com/kibotos/kibotos/internal/ctrl/apierr"
)

// selectorField is the request field every List call carries its selector in.
const selectorField = "label_selector"

// Selector is a parsed label selector: a conjunction of requirements. The
// zero Selector selects everything.
type Selector struct {
	// reqs is sorted and free of duplicates, so String is canonical.
	reqs []requirement
}

type operator uint8

// The order of the operators is the order String lists requirements on the
// same key in.
const (
	opExists operator = iota
	opNotExists
	opIn
	opNotIn
)

// requirement is one term of a selector. "k=v" and "k==v" are kept as opIn
// with one value and "k!=v" as opNotIn with one value: they mean exactly the
// same, and one representation makes equivalent spellings print the same.
type requirement struct {
	key    string
	op     operator
	values []string // sorted, without duplicates; only for opIn and opNotIn
}

// Parse parses a label selector in the Kubernetes syntax: comma-separated
// requirements that must all hold, each one of
//
//	k=v  k==v  k!=v  k  !k  k in (v1,v2)  k notin (v1,v2)
//
// with whitespace allowed between tokens. Keys must be qualified names and
// values label values. As in Kubernetes, a missing value is the empty value:
// "k=" requires k to be present and empty, "k in ()" is "k in ("")" and
// "k in (a,)" also admits the empty value. The empty string, or only
// whitespace, selects everything. The set-based comparisons of Kubernetes
// ("k>1", "k<1") are not supported.
//
// Errors are invalid_argument naming label_selector.
func Parse(s string) (Selector, error) {
	p := parser{lex: lexer{src: s}}
	reqs, err := p.parseSelector()
	if err != nil {
		return Selector{}, err
	}
	return Selector{reqs: canonical(reqs)}, nil
}

// Empty reports whether the selector selects everything.
func (s Selector) Empty() bool { return len(s.reqs) == 0 }

// Matches reports whether labels satisfy every requirement. As in
// Kubernetes, "k!=v" and "k notin (...)" match objects without k.
func (s Selector) Matches(labels map[string]string) bool {
	for _, r := range s.reqs {
		if !r.matches(labels) {
			return false
		}
	}
	return true
}

// String is the canonical text of the selector: requirements sorted by key,
// then operator, then values, duplicates removed, value sets sorted and
// single-value sets written as "=" or "!=". Selectors that differ only in
// spelling, whitespace or order have the same String, and String parses back
// to the same Selector. The zero Selector is "".
func (s Selector) String() string {
	parts := make([]string, len(s.reqs))
	for i, r := range s.reqs {
		parts[i] = r.String()
	}
	return strings.Join(parts, ",")
}

func (r requirement) matches(labels map[string]string) bool {
	v, ok := labels[r.key]
	switch r.op {
	case opExists:
		return ok
	case opNotExists:
		return !ok
	case opIn:
		return ok && slices.Contains(r.values, v)
	case opNotIn:
		return !ok || !slices.Contains(r.values, v)
	}
	return false
}

func (r requirement) String() string {
	switch r.op {
	case opExists:
		return r.key
	case opNotExists:
		return "!" + r.key
	case opIn:
		if len(r.values) == 1 {
			return r.key + "=" + r.values[0]
		}
		return r.key + " in (" + strings.Join(r.values, ",") + ")"
	case opNotIn:
		if len(r.values) == 1 {
			return r.key + "!=" + r.values[0]
		}
		return r.key + " notin (" + strings.Join(r.values, ",") + ")"
	}
	return ""
}

// canonical sorts each value set and the requirements, and drops repeated
// values and repeated requirements, none of which change what matches.
func canonical(reqs []requirement) []requirement {
	for i := range reqs {
		slices.Sort(reqs[i].values)
		reqs[i].values = slices.Compact(reqs[i].values)
	}
	slices.SortFunc(reqs, compareRequirements)
	return slices.CompactFunc(reqs, func(a, b requirement) bool {
		return compareRequirements(a, b) == 0
	})
}

func compareRequirements(a, b requirement) int {
	return cmp.Or(
		strings.Compare(a.key, b.key),
		cmp.Compare(a.op, b.op),
		slices.Compare(a.values, b.values),
	)
}

// tokenKind is the kind of one lexical token of a selector.
type tokenKind uint8

const (
	tokEnd tokenKind = iota
	tokIdent
	tokNot      // !
	tokEq       // = or ==
	tokNotEq    // !=
	tokComma    // ,
	tokOpenPar  // (
	tokClosePar // )
)

type token struct {
	kind tokenKind
	text string
	pos  int // byte offset in the selector, for error messages
}

// lexer splits a selector into tokens. An identifier is any run of bytes
// that are neither whitespace nor one of the operator characters; whether it
// is a valid key or value is checked by the parser, which gives better
// messages than a lexical error would.
type lexer struct {
	src string
	pos int
}

func isSpace(c byte) bool { return c == ' ' || c == '\t' || c == '\r' || c == '\n' }

func isOperatorChar(c byte) bool { return strings.IndexByte("!=,()<>", c) >= 0 }

func (l *lexer) next() (token, error) {
	for l.pos < len(l.src) && isSpace(l.src[l.pos]) {
		l.pos++
	}
	start := l.pos
	if start == len(l.src) {
		return token{kind: tokEnd, pos: start}, nil
	}
	switch c := l.src[start]; c {
	case '!':
		if l.consume("!=") {
			return token{kind: tokNotEq, text: "!=", pos: start}, nil
		}
		l.pos++
		return token{kind: tokNot, text: "!", pos: start}, nil
	case '=':
		if !l.consume("==") {
			l.pos++
		}
		return token{kind: tokEq, text: l.src[start:l.pos], pos: start}, nil
	case ',':
		l.pos++
		return token{kind: tokComma, text: ",", pos: start}, nil
	case '(':
		l.pos++
		return token{kind: tokOpenPar, text: "(", pos: start}, nil
	case ')':
		l.pos++
		return token{kind: tokClosePar, text: ")", pos: start}, nil
	case '<', '>':
		return token{}, selectorError(start, "operator %q is not supported", string(c))
	}
	for l.pos < len(l.src) && !isSpace(l.src[l.pos]) && !isOperatorChar(l.src[l.pos]) {
		l.pos++
	}
	return token{kind: tokIdent, text: l.src[start:l.pos], pos: start}, nil
}

func (l *lexer) consume(s string) bool {
	if strings.HasPrefix(l.src[l.pos:], s) {
		l.pos += len(s)
		return true
	}
	return false
}

// parser is a recursive-descent parser over the lexer with one token of
// lookahead.
type parser struct {
	lex    lexer
	tok    token
	peeked bool
}

func (p *parser) peek() (token, error) {
	if !p.peeked {
		t, err := p.lex.next()
		if err != nil {
			return token{}, err
		}
		p.tok, p.peeked = t, true
	}
	return p.tok, nil
}

func (p *parser) take() (token, error) {
	t, err := p.peek()
	p.peeked = false
	return t, err
}

// parseSelector: empty | requirement ("," requirement)*
func (p *parser) parseSelector() ([]requirement, error) {
	t, err := p.peek()
	if err != nil || t.kind == tokEnd {
		return nil, err
	}
	var reqs []requirement
	for {
		r, err := p.parseRequirement()
		if err != nil {
			return nil, err
		}
		reqs = append(reqs, r)
		t, err := p.take()
		if err != nil {
			return nil, err
		}
		switch t.kind {
		case tokEnd:
			return reqs, nil
		case tokComma:
		default:
			return nil, unexpected(t, "',' or the end")
		}
	}
}

// parseRequirement: "!" key | key [ ("="|"=="|"!=") value | ("in"|"notin") set ]
func (p *parser) parseRequirement() (requirement, error) {
	t, err := p.take()
	if err != nil {
		return requirement{}, err
	}
	if t.kind == tokNot {
		key, err := p.parseKey()
		return requirement{key: key, op: opNotExists}, err
	}
	key, err := p.checkKey(t)
	if err != nil {
		return requirement{}, err
	}
	t, err = p.peek()
	if err != nil {
		return requirement{}, err
	}
	switch {
	case t.kind == tokEnd || t.kind == tokComma:
		return requirement{key: key, op: opExists}, nil
	case t.kind == tokEq || t.kind == tokNotEq:
		p.peeked = false
		v, err := p.parseExactValue()
		op := opIn
		if t.kind == tokNotEq {
			op = opNotIn
		}
		return requirement{key: key, op: op, values: []string{v}}, err
	case t.kind == tokIdent && (t.text == "in" || t.text == "notin"):
		p.peeked = false
		vs, err := p.parseSet()
		op := opIn
		if t.text == "notin" {
			op = opNotIn
		}
		return requirement{key: key, op: op, values: vs}, err
	}
	return requirement{}, unexpected(t, "an operator (=, ==, !=, in, notin), ',' or the end")
}

func (p *parser) parseKey() (string, error) {
	t, err := p.take()
	if err != nil {
		return "", err
	}
	return p.checkKey(t)
}

func (p *parser) checkKey(t token) (string, error) {
	if t.kind != tokIdent {
		return "", unexpected(t, "a key")
	}
	if msg := checkQualifiedName(t.text); msg != "" {
		return "", selectorError(t.pos, "key %q %s", t.text, msg)
	}
	return t.text, nil
}

// parseExactValue reads the value after =, == or !=; none is the empty value.
func (p *parser) parseExactValue() (string, error) {
	t, err := p.peek()
	if err != nil {
		return "", err
	}
	if t.kind == tokEnd || t.kind == tokComma {
		return "", nil
	}
	p.peeked = false
	return checkValue(t)
}

// parseSet: "(" [value] ("," [value])* ")", where each missing value is the
// empty value, as Kubernetes reads "()", "(a,)" and "(,a)".
func (p *parser) parseSet() ([]string, error) {
	t, err := p.take()
	if err != nil {
		return nil, err
	}
	if t.kind != tokOpenPar {
		return nil, unexpected(t, "'('")
	}
	var values []string
	for {
		t, err := p.take()
		if err != nil {
			return nil, err
		}
		v := ""
		if t.kind == tokIdent {
			if v, err = checkValue(t); err != nil {
				return nil, err
			}
			if t, err = p.take(); err != nil {
				return nil, err
			}
		}
		values = append(values, v)
		switch t.kind {
		case tokClosePar:
			return values, nil
		case tokComma:
		default:
			return nil, unexpected(t, "a value, ',' or ')'")
		}
	}
}

func checkValue(t token) (string, error) {
	if t.kind != tokIdent {
		return "", unexpected(t, "a value")
	}
	if msg := checkLabelValue(t.text); msg != "" {
		return "", selectorError(t.pos, "value %q %s", t.text, msg)
	}
	return t.text, nil
}

func unexpected(t token, want string) error {
	if t.kind == tokEnd {
		return selectorError(t.pos, "unexpected end, expected %s", want)
	}
	return selectorError(t.pos, "unexpected %q, expected %s", t.text, want)
}

func selectorError(pos int, format string, args ...any) error {
	return apierr.Invalid(selectorField, "at offset %d: %s", pos, fmt.Sprintf(format, args...))
}
