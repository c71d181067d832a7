// Test-only Ed25519 keys and a grant signer, for the vector generator and
// the tests that need a grant of their own. Nothing here is the client's.
import { createHash, createPrivateKey, createPublicKey, sign } from "node:crypto";

/** Unpadded base64url. */
export const b64 = (b) => Buffer.from(b).toString("base64url");
/** Lowercase hex SHA-256. */
export const sha256 = (s) => createHash("sha256").update(s).digest("hex");

/** A test-only key: its seed is derived from a label, so the file is the same on every run. */
export function testKey(label) {
  const seed = createHash("sha256").update(`gated grant test vectors: ${label}`).digest();
  const priv = createPrivateKey({ key: Buffer.concat([Buffer.from("302e020100300506032b657004220420", "hex"), seed]), format: "der", type: "pkcs8" });
  const x = createPublicKey(priv).export({ format: "jwk" }).x;
  const kid = b64(createHash("sha256").update(Buffer.from(x, "base64url")).digest().subarray(0, 16));
  return { label, seed: b64(seed), priv, x, kid };
}

/** A compact JWS of header and payload (objects, or JSON text to keep its bytes), signed with key. */
export function signToken(h, p, key) {
  const enc = (v) => b64(typeof v === "string" ? v : JSON.stringify(v));
  const input = enc(h) + "." + enc(p);
  return input + "." + b64(sign(null, Buffer.from(input), key.priv));
}

/** The key set entry of key. */
export function keyEntry(key, createdAt, maxTTL, retiredAt) {
  return { kid: key.kid, kty: "OKP", crv: "Ed25519", x: key.x, created_at: createdAt, ...(retiredAt === undefined ? {} : { retired_at: retiredAt }), max_ttl_s: maxTTL };
}
