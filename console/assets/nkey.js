// @ts-check
// Operator keys in the browser: an nkey user seed ("SU…", as `gated
// operator keygen` writes it) is read here, imported into WebCrypto as a
// non-extractable Ed25519 key, and used to sign. The seed is never sent
// anywhere and never stored; the imported key lives in this page's memory
// only, so a reload asks for the seed again.

const B32 = "ABCDEFGHIJKLMNOPQRSTUVWXYZ234567";

// Prefix bytes of nkeys' encoding.
const PREFIX_SEED = 18 << 3; // "S"
const PREFIX_USER = 20 << 3; // "U"

/**
 * Decodes RFC 4648 base32 without padding.
 * @param {string} s
 * @returns {Uint8Array}
 */
function base32Decode(s) {
  const out = [];
  let bits = 0;
  let value = 0;
  for (const ch of s) {
    const i = B32.indexOf(ch);
    if (i < 0) throw new Error("the seed holds a character that is not base32: paste it as keygen wrote it");
    value = (value << 5) | i;
    bits += 5;
    if (bits >= 8) {
      out.push((value >>> (bits - 8)) & 0xff);
      bits -= 8;
    }
  }
  return Uint8Array.from(out);
}

/**
 * Encodes RFC 4648 base32 without padding.
 * @param {Uint8Array} b
 * @returns {string}
 */
function base32Encode(b) {
  let out = "";
  let bits = 0;
  let value = 0;
  for (const byte of b) {
    value = (value << 8) | byte;
    bits += 8;
    while (bits >= 5) {
      out += B32[(value >>> (bits - 5)) & 31];
      bits -= 5;
    }
  }
  if (bits > 0) out += B32[(value << (5 - bits)) & 31];
  return out;
}

/**
 * CRC-16/XMODEM, the checksum nkeys append (polynomial 0x1021, start 0).
 * @param {Uint8Array} data
 * @returns {number}
 */
function crc16(data) {
  let crc = 0;
  for (const byte of data) {
    crc ^= byte << 8;
    for (let i = 0; i < 8; i++) {
      crc = crc & 0x8000 ? ((crc << 1) ^ 0x1021) & 0xffff : (crc << 1) & 0xffff;
    }
  }
  return crc;
}

/**
 * Base64 with the URL alphabet and no padding, as gated reads signatures.
 * @param {Uint8Array} b
 * @returns {string}
 */
export function base64url(b) {
  let s = "";
  for (const byte of b) s += String.fromCharCode(byte);
  return btoa(s).replace(/\+/g, "-").replace(/\//g, "_").replace(/=+$/, "");
}

/**
 * Decodes base64 of the URL alphabet without padding.
 * @param {string} s
 * @returns {Uint8Array}
 */
function fromBase64url(s) {
  const bin = atob(s.replace(/-/g, "+").replace(/_/g, "/"));
  return Uint8Array.from(bin, (c) => c.charCodeAt(0));
}

/**
 * Reads an nkey user seed: the 32 bytes of its Ed25519 seed. A creds
 * file's decoration around the seed is accepted.
 * @param {string} text
 * @returns {Uint8Array}
 */
export function parseUserSeed(text) {
  const m = text.match(/SU[A-Z2-7]{56}/);
  if (!m) throw new Error("no nkey user seed (SU…, 58 characters) found: paste the file gated operator keygen wrote");
  const raw = base32Decode(m[0]);
  if (raw.length !== 36) throw new Error("the seed has the wrong length");
  const body = raw.subarray(0, 34);
  const sum = raw[34] | (raw[35] << 8);
  if (crc16(body) !== sum) throw new Error("the seed's checksum is wrong: it was mistyped or cut");
  const b1 = raw[0];
  const b2 = raw[1];
  if ((b1 & 0xf8) !== PREFIX_SEED || (((b1 & 7) << 5) | ((b2 & 0xf8) >> 3)) !== PREFIX_USER) {
    throw new Error("this is not a user seed (SU…)");
  }
  return raw.slice(2, 34);
}

/**
 * Encodes a raw Ed25519 public key as an nkey public user key ("U…").
 * @param {Uint8Array} pub
 * @returns {string}
 */
export function userPublicKey(pub) {
  const raw = new Uint8Array(35);
  raw[0] = PREFIX_USER;
  raw.set(pub, 1);
  const sum = crc16(raw.subarray(0, 33));
  raw[33] = sum & 0xff;
  raw[34] = sum >> 8;
  return base32Encode(raw);
}

// PKCS #8 wrapping of a raw Ed25519 private key (RFC 8410).
const PKCS8_ED25519 = Uint8Array.from([0x30, 0x2e, 0x02, 0x01, 0x00, 0x30, 0x05, 0x06, 0x03, 0x2b, 0x65, 0x70, 0x04, 0x22, 0x04, 0x20]);

/**
 * @typedef {object} OperatorKey
 * @property {CryptoKey} key non-extractable Ed25519 signing key
 * @property {string} publicKey nkey public user key (U…)
 */

/**
 * Imports a seed as a non-extractable signing key and derives its public
 * key. WebCrypto derives the public key only from a key it may export, so
 * the seed is imported twice: once, extractable, to learn the public key
 * (that key is dropped at once), and once as the non-extractable key kept.
 * @param {string} text the seed, or a creds file holding it
 * @returns {Promise<OperatorKey>}
 */
export async function importSeed(text) {
  const seed = parseUserSeed(text);
  const pkcs8 = new Uint8Array(PKCS8_ED25519.length + 32);
  pkcs8.set(PKCS8_ED25519);
  pkcs8.set(seed, PKCS8_ED25519.length);
  try {
    const probe = await crypto.subtle.importKey("pkcs8", pkcs8, { name: "Ed25519" }, true, ["sign"]);
    const jwk = await crypto.subtle.exportKey("jwk", probe);
    if (!jwk.x) throw new Error("the browser did not derive the public key");
    const key = await crypto.subtle.importKey("jwk", { kty: "OKP", crv: "Ed25519", d: jwk.d, x: jwk.x }, { name: "Ed25519" }, false, ["sign"]);
    return { key, publicKey: userPublicKey(fromBase64url(jwk.x)) };
  } finally {
    pkcs8.fill(0);
    seed.fill(0);
  }
}

/**
 * Signs bytes with the operator's key.
 * @param {OperatorKey} k
 * @param {BufferSource} data
 * @returns {Promise<string>} the signature, base64url without padding
 */
export async function sign(k, data) {
  const sig = await crypto.subtle.sign({ name: "Ed25519" }, k.key, data);
  return base64url(new Uint8Array(sig));
}
