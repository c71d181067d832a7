package audit

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"fmt"
	"hash"

	"github.com/gated/gated"
)

// The checks of single records, which Verify runs on several goroutines
// before it follows the chains in stream order.

// recordCheck is what the checks of one message on its own found: its
// body's hash, its form, its hash header and MAC. It is computed on any
// goroutine (recordChecker.check) and applied in stream order
// (auditVerifier.apply), which checks the chains.
type recordCheck struct {
	seq    uint64
	tenant string
	// digest is the hex SHA-256 of the body.
	digest string
	// invalid says why the message is not a valid record; empty for a
	// record.
	invalid string
	// hashBad is set when the body does not match its hash header, and
	// macProblem says what is wrong with its MAC (empty when nothing is,
	// or when no keys were given).
	hashBad    bool
	macProblem string
	// macKind is the kind of problem macProblem is: forged unless set.
	macKind ProblemKind
	chain   Chain
	// verdict is set for the verdict.decided record of a proposal: the
	// quick print of the verdict it holds, which the verdict check
	// compares with the stored verdicts (see quickPrint); ok is false
	// when the record has none and the check must read it in full.
	verdict   bool
	print     quickPrint
	printable bool
	// byGID says print is the gid print of a verdict whose record folded
	// its grant (gidPrintOf), which compares with the stored verdict's.
	byGID bool
	// full is the print of the verdict itself (printVerdict), for a
	// version-2 record that folded the verdict's grant: its data lacks
	// the grant's token, which the stored verdict has, so no quick print
	// of it matches. fullOK is false when there is none.
	full   verdictPrint
	fullOK bool
}

// recordChecker runs the checks of single messages. Each goroutine
// needs its own: it keeps an HMAC per key for reuse.
type recordChecker struct {
	keys map[string][]byte
	macs map[string]hash.Hash
	// prints is set when the verdict check needs the prints of the
	// verdict records (recordCheck.print, recordCheck.full): Verify's
	// checkers, not a Checker's.
	prints bool
	// scratch holds the JSON, when compressed, and the expanded events
	// of the record of version 2 or 3 being checked; the next check writes
	// over them.
	scratch decodeScratch
}

func newRecordChecker(keys map[string][]byte, prints bool) *recordChecker {
	c := &recordChecker{keys: keys, prints: prints}
	if keys != nil {
		c.macs = make(map[string]hash.Hash, len(keys))
		for id, k := range keys {
			c.macs[id] = hmac.New(sha256.New, k)
		}
	}
	return c
}

// check checks e on its own. An entry already decoded (e.Record or e.Err
// set) is taken as it is; otherwise the body is decoded.
func (c *recordChecker) check(e Entry) recordCheck {
	sum := sha256.Sum256(e.Data)
	rc := recordCheck{seq: e.Seq, digest: hex.EncodeToString(sum[:])}
	if e.Record == nil && e.Err == nil && c.keys != nil && quickKeyed {
		if keyed, ok := c.checkKeyed(e, sum, rc); ok {
			return keyed
		}
	}
	if e.Record == nil && e.Err == nil {
		// The record is read here alone, so its events may go into the
		// checker's scratch.
		e.Record, e.Err = decodeRecord(e.Subject, e.Header, e.Data, &c.scratch)
	}
	switch r := e.Record; {
	case r == nil:
		rc.tenant, rc.invalid = subjectTenant(e.Subject), e.Err.Error()
		return rc
	case r.V > 1:
		return c.checkDecoded(r, rc, sum)
	default:
		last := r.Last()
		return c.checkView(recordView{event: []byte(last.Event), tenant: []byte(r.Tenant), proposalID: []byte(r.ProposalID),
			chain: r.Chain, data: last.Data, hash: r.Hash, mac: r.MAC, keyID: r.KeyID}, rc)
	}
}

// checkView checks a record of version 1 read through rv.
func (c *recordChecker) checkView(rv recordView, rc recordCheck) recordCheck {
	rc.tenant, rc.chain = string(rv.tenant), rv.chain
	rc.hashBad = rv.hash != rc.digest
	rc.macProblem = c.checkMAC(rv)
	if string(rv.event) == gated.EventVerdict && len(rv.proposalID) > 0 && rc.tenant != gated.UnknownTenant {
		rc.verdict = true
		if c.prints {
			rc.print, rc.printable = quickPrintOf(rv.tenant, rv.proposalID, rv.data, recordDropped)
		}
	}
	return rc
}

// checkDecoded checks r, a record of version 2 or 3 decoded in full: its body
// has no hash header to match (its hash is computed), its MAC covers the
// body's hash, and a MAC that does not verify is a modified body; a
// verdict it holds gets the print the verdict check compares with the
// stored verdict. sum is the SHA-256 of its body.
func (c *recordChecker) checkDecoded(r *Record, rc recordCheck, sum [sha256.Size]byte) recordCheck {
	rc.tenant, rc.chain = r.Tenant, r.Chain
	if c.keys != nil {
		switch m, ok := c.macs[r.KeyID]; {
		case r.MAC == "":
			rc.macProblem = "no MAC, yet records are MACed"
		case !ok:
			rc.macProblem = fmt.Sprintf("MACed with unknown key %s", r.KeyID)
		case !macMatches(m, sum, r.MAC):
			rc.macProblem, rc.macKind = fmt.Sprintf("the MAC does not match under key %s", r.KeyID)+macMeaning(r), macProblem(r)
		}
	}
	if ev, ok := r.Find(gated.EventVerdict); ok && r.ProposalID != "" && r.Tenant != gated.UnknownTenant {
		rc.verdict = true
		if !c.prints {
			return rc
		}
		g, folded := r.Find(gated.EventGrantIssued)
		rc.printEvent(r.Tenant, r.ProposalID, ev, g, folded)
		if folded && !rc.printable {
			if v, err := decodeVerdictRecord(r); err == nil {
				rc.full, rc.fullOK = printVerdict(v), true
			}
		}
	}
	return rc
}

// printEvent sets rc's print of ev, the verdict.decided event of
// tenant's proposal id in a record of version 2 or 3; g is the record's
// grant.issued event when folded. The expanded verdict is the data a
// version-1 record would hold, byte for byte, unless the record folded
// the grant and left its token out: then only the verdict's own print
// compares, its gid print, or when there is none (rc.printable false)
// the print of the verdict decoded from the whole record.
func (rc *recordCheck) printEvent(tenant, id string, ev, g gated.AuditEvent, folded bool) {
	if !folded {
		rc.print, rc.printable = quickPrintOf([]byte(tenant), []byte(id), ev.Data, recordDropped)
		return
	}
	if gid, ok := grantEventGID(g); ok {
		rc.print, rc.printable = gidPrintOf([]byte(tenant), []byte(id), ev.Data, recordDropped, gid)
		rc.byGID = rc.printable
	}
}

// macEncoding reads a MAC header of version 2 or 3.
var macEncoding = base64.RawURLEncoding.Strict()

// macMatches reports whether mac, a version-2 or 3 record's MAC header, is
// m's MAC of digest, the SHA-256 of the record's body.
func macMatches(m hash.Hash, digest [sha256.Size]byte, mac string) bool {
	var got, want [sha256.Size]byte
	if base64.RawURLEncoding.EncodedLen(len(got)) != len(mac) {
		return false
	}
	// Strict: the writer's spelling only, as the header was compared
	// before; a MAC spelt with other trailing bits does not match.
	if n, err := macEncoding.Decode(got[:], []byte(mac)); err != nil || n != len(got) {
		return false
	}
	m.Reset()
	m.Write(digest[:])
	return hmac.Equal(m.Sum(want[:0]), got[:])
}

// checkMAC says what is wrong with rv's MAC under the keys, or "".
func (c *recordChecker) checkMAC(rv recordView) string {
	if c.keys == nil {
		return ""
	}
	if rv.mac == "" {
		return "no MAC, yet records are MACed"
	}
	m, ok := c.macs[rv.keyID]
	if !ok {
		return fmt.Sprintf("MACed with unknown key %s", rv.keyID)
	}
	// The MAC covers the 32 bytes the hash header spells; it is compared
	// as bytes, so a MAC spelt in upper case hex matches as before.
	var digest, got [sha256.Size]byte
	if _, err := hex.Decode(digest[:], []byte(rv.hash)); err != nil || len(rv.hash) != 2*sha256.Size ||
		len(rv.mac) != 2*sha256.Size {
		return fmt.Sprintf("the MAC does not match under key %s", rv.keyID)
	}
	if _, err := hex.Decode(got[:], []byte(rv.mac)); err != nil {
		return fmt.Sprintf("the MAC does not match under key %s", rv.keyID)
	}
	m.Reset()
	m.Write(digest[:])
	var want [sha256.Size]byte
	if !hmac.Equal(m.Sum(want[:0]), got[:]) {
		return fmt.Sprintf("the MAC does not match under key %s", rv.keyID)
	}
	return ""
}

// macProblem is the kind of problem of a record whose MAC, under a key
// given, does not verify. A version-1 record's MAC covers its hash
// header, which the body is checked against first: a wrong MAC there is
// a record not written with the key. A version-2 or 3 record's MAC covers the
// body itself, so a body altered in the store shows here: modified, as
// the version-1 hash showed it.
func macProblem(r *Record) ProblemKind {
	if r.V > 1 {
		return ProblemModified
	}
	return ProblemForged
}

func macMeaning(r *Record) string {
	if r.V > 1 {
		return ": the body was altered, or written without the key"
	}
	return ""
}

// recordView is a valid record as Verify checks it: its envelope and
// headers, sub-slices of the message, nothing copied.
type recordView struct {
	event, tenant, proposalID []byte
	chain                     Chain
	data                      []byte
	hash, mac, keyID          string
}
