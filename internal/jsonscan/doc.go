// Package jsonscan reads JSON text in place, without decoding it: white
// space, strings, numbers, literals and whole values, and the members and
// items of an object or array. It is the one scanner the fast paths of
// gated share (the proposal decoder, the audit writer and verifier, the
// replay readers), held to encoding/json once, by FuzzValue and FuzzSkip.
//
// Every function takes the text and an offset, and returns the offset
// just past what it read. There are two contracts:
//
//   - Space, String, Value, Number and Literal check what they read:
//     they return -1 when data[i:] does not start with it, exactly where
//     encoding/json's Valid would refuse it (a string's bytes outside
//     ASCII are taken as they come, as encoding/json takes them; Value
//     refuses more than MaxDepth nested arrays and objects, as encoding/json
//     does). Space never fails.
//   - SkipString, SkipValue, Members and Items assume valid JSON, which
//     their caller has checked or was handed, and are cheaper: what they
//     return for text that is not valid JSON is unspecified, yet within
//     data, and they never panic. The one check they make is that a
//     string closes: SkipString returns -1 when data ends first.
//
// Nothing here allocates but Value past 64 levels of nesting.
package jsonscan
