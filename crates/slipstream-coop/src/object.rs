//! Riptide's objects (004 §3.1, §4.1): a cached HTTP response named by a GUID, the hash of its
//! cache provider's public key and its URL, and signed by that provider.
//!
//! A gateway fetches a response from the origin, stores the response head, the body and the
//! times of the exchange (the paper keeps "the time of the response in the metadata" so that
//! freshness can be judged without reading the content; RFC 9111 §4.2.3 needs both the request
//! and the response time) and signs it with the provider's key. A browser proxy that knows the
//! provider's public key derives the GUID from the URL, finds a replica anywhere, and accepts it
//! only if the signature verifies under a key it trusts and the GUID matches: a node that
//! tampers with a replica or makes one up cannot pass it off (§4.2.3's trust argument).
//!
//! The paper hashes with SHA-1 over the plain concatenation; we use SHA-256 and prefix the key
//! with its length, so that no (key, URL) pair can collide with another by moving bytes across
//! the boundary.

use std::fmt;

use bytes::Bytes;
use libp2p::identity::{Keypair, PublicKey};

/// The longest URL an object may have.
pub const MAX_URL_BYTES: usize = 8 * 1024;
/// The most header fields an object may have.
pub const MAX_HEADERS: usize = 256;
/// The most bytes of header names and values an object may have.
pub const MAX_HEADER_BYTES: usize = 64 * 1024;
/// The largest body an object may have.
pub const MAX_BODY_BYTES: usize = 64 * 1024 * 1024;

const MAGIC: &[u8; 4] = b"SSCO";
/// Format 2 signs the head and the body's SHA-256 (format 1 signed the body itself, so no
/// head could be renewed without moving the body). Objects of format 1 are not read: a store
/// drops them at start and they are fetched again.
const FORMAT: u8 = 2;
/// A freshness record's magic: the signed head of an object, without its body.
const RECORD_MAGIC: &[u8; 4] = b"SSCF";
/// Signatures are over this tag, the object's head and its body's SHA-256, so that no other
/// message the key signs (gossipsub's, for one) can be replayed as an object.
const SIGNING_TAG: &[u8] = b"slipstream-coop/object/v2\0";

/// The public key inside an ed25519 peer id (`12D3KooW…`), which embeds its key: how a
/// configuration names a cache provider to trust. `None` for ids that only hash their key.
pub fn key_of_peer_id(peer: &libp2p::PeerId) -> Option<PublicKey> {
    let mh = peer.as_ref();
    if mh.code() != 0 {
        return None;
    }
    PublicKey::try_decode_protobuf(mh.digest()).ok()
}

/// An object's globally unique identifier: SHA-256(len(key) ‖ key ‖ URL), `key` the cache
/// provider's public key in its protobuf encoding.
#[derive(Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Guid(pub [u8; 32]);

impl Guid {
    /// The GUID of `url` cached by the provider whose key is `provider`.
    pub fn new(provider: &PublicKey, url: &str) -> Guid {
        let key = provider.encode_protobuf();
        let mut ctx = ring::digest::Context::new(&ring::digest::SHA256);
        ctx.update(&(key.len() as u32).to_be_bytes());
        ctx.update(&key);
        ctx.update(url.as_bytes());
        let mut out = [0u8; 32];
        out.copy_from_slice(ctx.finish().as_ref());
        Guid(out)
    }

    /// A GUID from its 32 bytes (as carried in peer messages).
    pub fn from_slice(bytes: &[u8]) -> Result<Guid, DecodeError> {
        let arr: [u8; 32] = bytes
            .try_into()
            .map_err(|_| DecodeError::Field("guid", "must be 32 bytes"))?;
        Ok(Guid(arr))
    }

    /// Lower-case hex.
    pub fn to_hex(&self) -> String {
        self.0.iter().map(|b| format!("{b:02x}")).collect()
    }
}

impl fmt::Debug for Guid {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Guid({})", &self.to_hex()[..16])
    }
}

impl fmt::Display for Guid {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.to_hex())
    }
}

/// A cached HTTP response and its metadata.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Object {
    /// The absolute URL it answers.
    pub url: String,
    /// The response's status code.
    pub status: u16,
    /// The response's header fields, in order (names lower-case).
    pub headers: Vec<(String, Vec<u8>)>,
    /// The response body.
    pub body: Bytes,
    /// When the gateway sent the request, milliseconds since the Unix epoch (RFC 9111's
    /// `request_time`).
    pub requested_at_ms: u64,
    /// When the response arrived (RFC 9111's `response_time`, the paper's metadata).
    pub received_at_ms: u64,
    /// Increases with every update its provider signs; a replica keeps the highest.
    pub version: u64,
}

impl Object {
    /// Whether `other` is the same response: status, body and header fields but `Date` and
    /// `Age` (which a refetch changes), whatever the order of differently named fields.
    pub fn same_content(&self, other: &Object) -> bool {
        // The order of differently named fields carries no meaning (RFC 9110 §5.3), and a
        // 304's update moves the fields it names to the end; lines of one name keep theirs.
        let head = |o: &Object| -> Vec<(String, Vec<u8>)> {
            let mut fields: Vec<_> = o
                .headers
                .iter()
                .filter(|(n, _)| n != "date" && n != "age")
                .cloned()
                .collect();
            fields.sort_by(|a, b| a.0.cmp(&b.0));
            fields
        };
        self.status == other.status && self.body == other.body && head(self) == head(other)
    }

    /// Bytes it takes in a cache: body, URL and header fields.
    pub fn size(&self) -> u64 {
        let head: usize = self.headers.iter().map(|(n, v)| n.len() + v.len()).sum();
        (self.body.len() + self.url.len() + head) as u64
    }

    /// The first value of header `name` (lower-case), as text.
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(n, _)| n == name)
            .and_then(|(_, v)| std::str::from_utf8(v).ok())
    }

    fn encode_into(&self, out: &mut impl Sink) {
        self.encode_head_into(out);
        put_bytes(out, &self.body);
    }

    /// Everything but the body.
    fn encode_head_into(&self, out: &mut impl Sink) {
        put_bytes(out, self.url.as_bytes());
        out.put(&self.status.to_be_bytes());
        out.put(&(self.headers.len() as u32).to_be_bytes());
        for (name, value) in &self.headers {
            put_bytes(out, name.as_bytes());
            put_bytes(out, value);
        }
        out.put(&self.requested_at_ms.to_be_bytes());
        out.put(&self.received_at_ms.to_be_bytes());
        out.put(&self.version.to_be_bytes());
    }

    /// SHA-256 of the body.
    pub fn body_hash(&self) -> [u8; 32] {
        sha256(&self.body)
    }

    fn decode_from(r: &mut Reader<'_>) -> Result<Object, DecodeError> {
        let mut object = Object::decode_head_from(r)?;
        object.body = Bytes::copy_from_slice(r.bytes("body", MAX_BODY_BYTES)?);
        Ok(object)
    }

    /// The head [`Object::encode_head_into`] wrote, with an empty body.
    fn decode_head_from(r: &mut Reader<'_>) -> Result<Object, DecodeError> {
        let url = r.string("url", MAX_URL_BYTES)?;
        let status = r.u16("status")?;
        if !(100..=999).contains(&status) {
            return Err(DecodeError::Field("status", "not an HTTP status code"));
        }
        let n = r.u32("headers")? as usize;
        if n > MAX_HEADERS {
            return Err(DecodeError::Field("headers", "too many header fields"));
        }
        let mut headers = Vec::with_capacity(n);
        let mut head_bytes = 0usize;
        for _ in 0..n {
            let name = r.string("header name", MAX_HEADER_BYTES)?;
            let value = r.bytes("header value", MAX_HEADER_BYTES)?.to_vec();
            head_bytes += name.len() + value.len();
            if head_bytes > MAX_HEADER_BYTES {
                return Err(DecodeError::Field("headers", "header fields too large"));
            }
            headers.push((name, value));
        }
        let requested_at_ms = r.u64("requested_at")?;
        let received_at_ms = r.u64("received_at")?;
        let version = r.u64("version")?;
        Ok(Object {
            url,
            status,
            headers,
            body: Bytes::new(),
            requested_at_ms,
            received_at_ms,
            version,
        })
    }

    /// What the provider signs: the tag, the head and `body_hash` (the body's SHA-256), so
    /// that a renewed head can travel without its body ([`Freshness`]).
    fn signing_bytes(&self, body_hash: &[u8; 32]) -> Vec<u8> {
        let head: usize = self
            .headers
            .iter()
            .map(|(n, v)| n.len() + v.len() + 8)
            .sum();
        let mut out = Vec::with_capacity(SIGNING_TAG.len() + self.url.len() + head + 96);
        out.extend_from_slice(SIGNING_TAG);
        self.encode_head_into(&mut out);
        out.extend_from_slice(body_hash);
        out
    }

    /// Signs the object with its cache provider's key.
    pub fn sign(self, provider: &Keypair) -> Result<SignedObject, SignError> {
        let signature = provider
            .sign(&self.signing_bytes(&self.body_hash()))
            .map_err(|e| SignError(e.to_string()))?;
        Ok(SignedObject {
            object: self,
            provider: provider.public(),
            signature,
            delegation: None,
        })
    }

    /// Signs the object with `key`, a key the provider vouched for by `delegation`.
    pub fn sign_delegated(
        self,
        key: &Keypair,
        delegation: &Delegation,
    ) -> Result<SignedObject, SignError> {
        if delegation.key != key.public() {
            return Err(SignError("the delegation is for another key".into()));
        }
        let signature = key
            .sign(&self.signing_bytes(&self.body_hash()))
            .map_err(|e| SignError(e.to_string()))?;
        Ok(SignedObject {
            object: self,
            provider: delegation.provider.clone(),
            signature,
            delegation: Some(delegation.clone()),
        })
    }
}

/// A delegation (how certificate chains do it): the cache provider's key vouches for another
/// key, a gateway's, until `expires_ms`. What that key signs verifies as the provider's, so
/// several gateways sign without sharing the provider's key, which can stay offline; a
/// gateway's key that leaks is good only until its delegation expires.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Delegation {
    /// The provider's public key, which signed it.
    pub provider: PublicKey,
    /// The key vouched for.
    pub key: PublicKey,
    /// Until when, Unix milliseconds.
    pub expires_ms: u64,
    /// The provider's signature.
    pub signature: Vec<u8>,
}

const DELEGATION_MAGIC: &[u8; 4] = b"SSCD";
const DELEGATION_TAG: &[u8] = b"slipstream-coop/delegation/v1\0";

impl Delegation {
    /// The provider `provider` vouching for `key` until `expires_ms`.
    pub fn issue(
        provider: &Keypair,
        key: PublicKey,
        expires_ms: u64,
    ) -> Result<Delegation, SignError> {
        let signature = provider
            .sign(&Delegation::signing_bytes(
                &provider.public(),
                &key,
                expires_ms,
            ))
            .map_err(|e| SignError(e.to_string()))?;
        Ok(Delegation {
            provider: provider.public(),
            key,
            expires_ms,
            signature,
        })
    }

    fn signing_bytes(provider: &PublicKey, key: &PublicKey, expires_ms: u64) -> Vec<u8> {
        let mut out = DELEGATION_TAG.to_vec();
        put_bytes(&mut out, &provider.encode_protobuf());
        put_bytes(&mut out, &key.encode_protobuf());
        out.extend_from_slice(&expires_ms.to_be_bytes());
        out
    }

    /// Checks that the provider signed it and that it has not expired at `now_ms`.
    pub fn verify_at(&self, now_ms: u64) -> Result<(), VerifyError> {
        let signed = Delegation::signing_bytes(&self.provider, &self.key, self.expires_ms);
        if !self.provider.verify(&signed, &self.signature) {
            return Err(VerifyError::BadDelegation);
        }
        if now_ms > self.expires_ms {
            return Err(VerifyError::Expired(self.expires_ms));
        }
        Ok(())
    }

    /// The file and wire form.
    pub fn encode(&self) -> Vec<u8> {
        let mut out = DELEGATION_MAGIC.to_vec();
        out.push(1);
        put_bytes(&mut out, &self.provider.encode_protobuf());
        put_bytes(&mut out, &self.key.encode_protobuf());
        out.extend_from_slice(&self.expires_ms.to_be_bytes());
        put_bytes(&mut out, &self.signature);
        out
    }

    /// Reads [`Delegation::encode`]'s form; the signature is not checked here.
    pub fn decode(bytes: &[u8]) -> Result<Delegation, DecodeError> {
        let mut r = Reader { bytes, at: 0 };
        if r.take("magic", 4)? != DELEGATION_MAGIC {
            return Err(DecodeError::Field("magic", "not a delegation"));
        }
        let format = r.take("format", 1)?[0];
        if format != 1 {
            return Err(DecodeError::Format(format));
        }
        let provider = PublicKey::try_decode_protobuf(r.bytes("provider", 1024)?)
            .map_err(|_| DecodeError::Field("provider", "not a public key"))?;
        let key = PublicKey::try_decode_protobuf(r.bytes("key", 1024)?)
            .map_err(|_| DecodeError::Field("key", "not a public key"))?;
        let expires_ms = r.u64("expiry")?;
        let signature = r.bytes("signature", 1024)?.to_vec();
        if r.at != bytes.len() {
            return Err(DecodeError::Field("delegation", "trailing bytes"));
        }
        Ok(Delegation {
            provider,
            key,
            expires_ms,
            signature,
        })
    }
}

/// The key whose signature an object or record of `provider` must carry: the provider's own,
/// or the key its `delegation` vouches for, if `trusted` holds the provider and the delegation
/// verifies now.
fn signer<'a>(
    provider: &'a PublicKey,
    delegation: Option<&'a Delegation>,
    trusted: &[PublicKey],
) -> Result<&'a PublicKey, VerifyError> {
    if !trusted.contains(provider) {
        return Err(VerifyError::Untrusted(provider.to_peer_id().to_string()));
    }
    match delegation {
        None => Ok(provider),
        Some(d) if d.provider != *provider => Err(VerifyError::BadDelegation),
        Some(d) => {
            d.verify_at(crate::rules::unix_ms(std::time::SystemTime::now()))?;
            Ok(&d.key)
        }
    }
}

/// What an object's and a record's `verify` check: `trusted` holds the provider, the
/// delegation (if any) verifies now, `signature` is over `head` and `body_hash` under the key
/// that signed, and the GUID is `expected` (when given).
fn verify_signed(
    provider: &PublicKey,
    delegation: Option<&Delegation>,
    signature: &[u8],
    head: &Object,
    body_hash: &[u8; 32],
    trusted: &[PublicKey],
    expected: Option<&Guid>,
) -> Result<(), VerifyError> {
    let key = signer(provider, delegation, trusted)?;
    if !key.verify(&head.signing_bytes(body_hash), signature) {
        return Err(VerifyError::BadSignature);
    }
    if expected.is_some_and(|g| *g != Guid::new(provider, &head.url)) {
        return Err(VerifyError::WrongGuid);
    }
    Ok(())
}

/// Writes what precedes an object's or a record's head: `magic`, the format, the provider's
/// key, the signature and the delegation, if any.
fn put_signer(
    out: &mut Vec<u8>,
    magic: &[u8; 4],
    provider: &PublicKey,
    signature: &[u8],
    delegation: Option<&Delegation>,
) {
    out.extend_from_slice(magic);
    out.push(FORMAT);
    put_bytes(out, &provider.encode_protobuf());
    put_bytes(out, signature);
    put_delegation(out, delegation);
}

/// Reads what [`put_signer`] wrote; `not_this` says what the bytes are not when the magic
/// differs.
fn read_signer(
    r: &mut Reader<'_>,
    magic: &[u8; 4],
    not_this: &'static str,
) -> Result<(PublicKey, Vec<u8>, Option<Delegation>), DecodeError> {
    if r.take("magic", 4)? != magic {
        return Err(DecodeError::Field("magic", not_this));
    }
    let format = r.take("format", 1)?[0];
    if format != FORMAT {
        return Err(DecodeError::Format(format));
    }
    let provider = PublicKey::try_decode_protobuf(r.bytes("provider", 1024)?)
        .map_err(|_| DecodeError::Field("provider", "not a public key"))?;
    let signature = r.bytes("signature", 1024)?.to_vec();
    Ok((provider, signature, read_delegation(r)?))
}

/// Writes an optional delegation as a length-prefixed field (empty: none).
fn put_delegation(out: &mut Vec<u8>, d: Option<&Delegation>) {
    put_bytes(out, &d.map(Delegation::encode).unwrap_or_default());
}

fn read_delegation(r: &mut Reader<'_>) -> Result<Option<Delegation>, DecodeError> {
    let bytes = r.bytes("delegation", 4096)?;
    (!bytes.is_empty())
        .then(|| Delegation::decode(bytes))
        .transpose()
}

/// Signing failed (the key type cannot sign).
#[derive(Debug, thiserror::Error)]
#[error("cannot sign the object: {0}")]
pub struct SignError(String);

/// An object with its provider's key and signature, as stored and sent between nodes.
#[derive(Debug, Clone, PartialEq)]
pub struct SignedObject {
    /// The object.
    pub object: Object,
    /// The cache provider's public key.
    pub provider: PublicKey,
    /// The signature over the object: the provider's, or that of the key `delegation`
    /// vouches for.
    pub signature: Vec<u8>,
    /// The provider's delegation to the key that signed, if the provider's own did not.
    pub delegation: Option<Delegation>,
}

/// Why a received object was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum VerifyError {
    /// It was signed by a key the node does not trust.
    #[error("signed by an untrusted provider ({0})")]
    Untrusted(String),
    /// Its signature does not verify: it was altered, or never signed by that key.
    #[error("its signature does not verify (tampered or unsigned)")]
    BadSignature,
    /// It is not the object that was asked for.
    #[error("its GUID does not match its provider and URL")]
    WrongGuid,
    /// A freshness record for another body than the one held (the object changed).
    #[error("it is a record of another body than the one held")]
    OtherBody,
    /// Its delegation was not signed by its provider.
    #[error("its delegation was not signed by its provider")]
    BadDelegation,
    /// Its delegation expired (at this Unix millisecond).
    #[error("its delegation expired at {0} ms (Unix time): the gateway needs a new one")]
    Expired(u64),
}

impl SignedObject {
    /// The object's GUID.
    pub fn guid(&self) -> Guid {
        Guid::new(&self.provider, &self.object.url)
    }

    /// Checks that `trusted` holds the provider's key, that the signature verifies and that the
    /// object is `expected` (when given).
    pub fn verify(
        &self,
        trusted: &[PublicKey],
        expected: Option<&Guid>,
    ) -> Result<(), VerifyError> {
        verify_signed(
            &self.provider,
            self.delegation.as_ref(),
            &self.signature,
            &self.object,
            &self.object.body_hash(),
            trusted,
            expected,
        )
    }

    /// SHA-256 over the signature and the signed object (the encoding less its header and
    /// key), streamed without copying the body: what a store keeps beside an object it has
    /// verified, so that a copy altered since can be told from it without checking the
    /// signature again (about 40 times cheaper for a 1 KB body, 2 to 5 times for 16 KB to
    /// 1 MB ones; `store::tests::digest_cost`).
    pub fn digest(&self) -> [u8; 32] {
        let mut ctx = ring::digest::Context::new(&ring::digest::SHA256);
        put_bytes(&mut ctx, &self.signature);
        self.object.encode_into(&mut ctx);
        let mut out = [0u8; 32];
        out.copy_from_slice(ctx.finish().as_ref());
        out
    }

    /// The wire and disk form.
    pub fn encode(&self) -> Vec<u8> {
        let mut out = Vec::with_capacity(self.object.size() as usize + 256);
        put_signer(
            &mut out,
            MAGIC,
            &self.provider,
            &self.signature,
            self.delegation.as_ref(),
        );
        self.object.encode_into(&mut out);
        out
    }

    /// Reads [`SignedObject::encode`]'s form. Anything malformed is an error, never a panic;
    /// the signature is not checked here ([`SignedObject::verify`] does that).
    pub fn decode(bytes: &[u8]) -> Result<SignedObject, DecodeError> {
        let mut r = Reader { bytes, at: 0 };
        let (provider, signature, delegation) =
            read_signer(&mut r, MAGIC, "not a slipstream object")?;
        let object = Object::decode_from(&mut r)?;
        if r.at != bytes.len() {
            return Err(DecodeError::Field("object", "trailing bytes"));
        }
        Ok(SignedObject {
            object,
            provider,
            signature,
            delegation,
        })
    }
}

/// A freshness record (004 §5.4, RFC 9111 §4.3.4 across the cooperative cache): an object's
/// head as its provider signed it (new exchange times, the fields a 304 updated), with the
/// SHA-256 of the body that head goes with, and no body. The provider's signature of an object
/// covers exactly this, so a gateway that has revalidated an object sends the record of the
/// object it holds and signs nothing new; a replica holding the same body applies it
/// ([`Freshness::apply`]) and has an object whose signature verifies, fresh again, without the
/// body moving between nodes. A few hundred bytes, whatever the body's size.
#[derive(Debug, Clone, PartialEq)]
pub struct Freshness {
    /// The object's head: URL, status, fields, exchange times, version (body empty).
    pub head: Object,
    /// SHA-256 of the body the head goes with.
    pub body_hash: [u8; 32],
    /// The cache provider's public key.
    pub provider: PublicKey,
    /// The signature over the head and `body_hash`.
    pub signature: Vec<u8>,
    /// The provider's delegation to the key that signed, if the provider's own did not.
    pub delegation: Option<Delegation>,
}

impl SignedObject {
    /// The object's freshness record: its head and signature without the body.
    pub fn freshness(&self) -> Freshness {
        let mut head = self.object.clone();
        head.body = Bytes::new();
        Freshness {
            head,
            body_hash: self.object.body_hash(),
            provider: self.provider.clone(),
            signature: self.signature.clone(),
            delegation: self.delegation.clone(),
        }
    }
}

impl Freshness {
    /// The GUID of the object it renews.
    pub fn guid(&self) -> Guid {
        Guid::new(&self.provider, &self.head.url)
    }

    /// Checks that `trusted` holds the provider's key, that the signature verifies and that
    /// the record is for `expected` (when given).
    pub fn verify(
        &self,
        trusted: &[PublicKey],
        expected: Option<&Guid>,
    ) -> Result<(), VerifyError> {
        verify_signed(
            &self.provider,
            self.delegation.as_ref(),
            &self.signature,
            &self.head,
            &self.body_hash,
            trusted,
            expected,
        )
    }

    /// `held` renewed by this record: the held body under the record's head and signature,
    /// verified under `trusted`. An error when the record does not verify, is for another
    /// object, or goes with another body (the object changed: the new body must be fetched).
    pub fn apply(
        &self,
        held: &SignedObject,
        trusted: &[PublicKey],
    ) -> Result<SignedObject, VerifyError> {
        self.verify(trusted, Some(&held.guid()))?;
        if held.object.body_hash() != self.body_hash {
            return Err(VerifyError::OtherBody);
        }
        let mut object = self.head.clone();
        object.body = held.object.body.clone();
        Ok(SignedObject {
            object,
            provider: self.provider.clone(),
            signature: self.signature.clone(),
            delegation: self.delegation.clone(),
        })
    }

    /// The wire form.
    pub fn encode(&self) -> Vec<u8> {
        let mut out = Vec::with_capacity(self.head.size() as usize + 256);
        put_signer(
            &mut out,
            RECORD_MAGIC,
            &self.provider,
            &self.signature,
            self.delegation.as_ref(),
        );
        self.head.encode_head_into(&mut out);
        out.extend_from_slice(&self.body_hash);
        out
    }

    /// Reads [`Freshness::encode`]'s form; the signature is not checked here.
    pub fn decode(bytes: &[u8]) -> Result<Freshness, DecodeError> {
        let mut r = Reader { bytes, at: 0 };
        let (provider, signature, delegation) =
            read_signer(&mut r, RECORD_MAGIC, "not a freshness record")?;
        let head = Object::decode_head_from(&mut r)?;
        let mut body_hash = [0u8; 32];
        body_hash.copy_from_slice(r.take("body hash", 32)?);
        if r.at != bytes.len() {
            return Err(DecodeError::Field("record", "trailing bytes"));
        }
        Ok(Freshness {
            head,
            body_hash,
            provider,
            signature,
            delegation,
        })
    }

    /// Whether `bytes` starts as a freshness record (rather than an object).
    pub fn is_record(bytes: &[u8]) -> bool {
        bytes.starts_with(RECORD_MAGIC)
    }
}

fn sha256(bytes: &[u8]) -> [u8; 32] {
    let mut out = [0u8; 32];
    out.copy_from_slice(ring::digest::digest(&ring::digest::SHA256, bytes).as_ref());
    out
}

/// A malformed object encoding.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum DecodeError {
    /// It ends before the field.
    #[error("truncated at the {0}")]
    Truncated(&'static str),
    /// A field is out of its bounds or malformed.
    #[error("bad {0}: {1}")]
    Field(&'static str, &'static str),
    /// A format version this node does not read.
    #[error("unknown object format {0}")]
    Format(u8),
}

/// Where an encoding goes: a buffer, or a hash that never holds it whole.
trait Sink {
    fn put(&mut self, bytes: &[u8]);
}

impl Sink for Vec<u8> {
    fn put(&mut self, bytes: &[u8]) {
        self.extend_from_slice(bytes);
    }
}

impl Sink for ring::digest::Context {
    fn put(&mut self, bytes: &[u8]) {
        self.update(bytes);
    }
}

fn put_bytes(out: &mut impl Sink, b: &[u8]) {
    out.put(&(b.len() as u32).to_be_bytes());
    out.put(b);
}

struct Reader<'a> {
    bytes: &'a [u8],
    at: usize,
}

impl<'a> Reader<'a> {
    fn take(&mut self, what: &'static str, n: usize) -> Result<&'a [u8], DecodeError> {
        let end = self
            .at
            .checked_add(n)
            .filter(|e| *e <= self.bytes.len())
            .ok_or(DecodeError::Truncated(what))?;
        let out = &self.bytes[self.at..end];
        self.at = end;
        Ok(out)
    }

    fn u16(&mut self, what: &'static str) -> Result<u16, DecodeError> {
        let b = self.take(what, 2)?;
        Ok(u16::from_be_bytes([b[0], b[1]]))
    }

    fn u32(&mut self, what: &'static str) -> Result<u32, DecodeError> {
        let b = self.take(what, 4)?;
        Ok(u32::from_be_bytes([b[0], b[1], b[2], b[3]]))
    }

    fn u64(&mut self, what: &'static str) -> Result<u64, DecodeError> {
        let b = self.take(what, 8)?;
        let mut a = [0u8; 8];
        a.copy_from_slice(b);
        Ok(u64::from_be_bytes(a))
    }

    fn bytes(&mut self, what: &'static str, max: usize) -> Result<&'a [u8], DecodeError> {
        let n = self.u32(what)? as usize;
        if n > max {
            return Err(DecodeError::Field(what, "too long"));
        }
        self.take(what, n)
    }

    fn string(&mut self, what: &'static str, max: usize) -> Result<String, DecodeError> {
        let b = self.bytes(what, max)?;
        String::from_utf8(b.to_vec()).map_err(|_| DecodeError::Field(what, "not UTF-8"))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn object(url: &str, body: &[u8]) -> Object {
        Object {
            url: url.to_owned(),
            status: 200,
            headers: vec![
                ("content-type".into(), b"text/html".to_vec()),
                ("cache-control".into(), b"max-age=60".to_vec()),
            ],
            body: Bytes::copy_from_slice(body),
            requested_at_ms: 1_700_000_000_000,
            received_at_ms: 1_700_000_000_042,
            version: 1,
        }
    }

    #[test]
    fn a_signed_object_round_trips_and_verifies() {
        let key = Keypair::generate_ed25519();
        let signed = object("http://example.com/a", b"hello").sign(&key).unwrap();
        let back = SignedObject::decode(&signed.encode()).unwrap();
        assert_eq!(back, signed);
        let guid = Guid::new(&key.public(), "http://example.com/a");
        assert_eq!(back.guid(), guid);
        back.verify(&[key.public()], Some(&guid)).unwrap();
    }

    #[test]
    fn the_digest_changes_with_any_signed_byte_and_only_then() {
        let key = Keypair::generate_ed25519();
        let signed = object("http://example.com/a", b"hello").sign(&key).unwrap();
        let digest = signed.digest();
        assert_eq!(
            SignedObject::decode(&signed.encode()).unwrap().digest(),
            digest
        );
        let mut body = signed.clone();
        body.object.body = Bytes::from_static(b"hellO");
        let mut signature = signed.clone();
        signature.signature[0] ^= 1;
        let mut time = signed.clone();
        time.object.received_at_ms += 1;
        for altered in [body, signature, time] {
            assert_ne!(altered.digest(), digest);
        }
    }

    #[test]
    fn tampering_unsigned_and_untrusted_objects_are_refused() {
        let key = Keypair::generate_ed25519();
        let trusted = [key.public()];
        let signed = object("http://example.com/a", b"hello").sign(&key).unwrap();
        let guid = signed.guid();

        let mut body = signed.clone();
        body.object.body = Bytes::from_static(b"hellO");
        assert_eq!(
            body.verify(&trusted, Some(&guid)),
            Err(VerifyError::BadSignature)
        );
        let mut head = signed.clone();
        head.object.headers[1].1 = b"max-age=999999".to_vec();
        assert_eq!(head.verify(&trusted, None), Err(VerifyError::BadSignature));
        let mut version = signed.clone();
        version.object.version = 2;
        assert_eq!(
            version.verify(&trusted, None),
            Err(VerifyError::BadSignature)
        );

        let mut unsigned = signed.clone();
        unsigned.signature.clear();
        assert_eq!(
            unsigned.verify(&trusted, None),
            Err(VerifyError::BadSignature)
        );

        // Signed by someone else, claiming to be the provider: the signature fails.
        let forger = Keypair::generate_ed25519();
        let forged = object("http://example.com/a", b"evil")
            .sign(&forger)
            .unwrap();
        let mut claimed = forged.clone();
        claimed.provider = key.public();
        assert_eq!(
            claimed.verify(&trusted, None),
            Err(VerifyError::BadSignature)
        );
        // Signed honestly by an untrusted key.
        assert!(matches!(
            forged.verify(&trusted, None),
            Err(VerifyError::Untrusted(_))
        ));
        // The right object under another URL's GUID.
        let other = Guid::new(&key.public(), "http://example.com/b");
        assert_eq!(
            signed.verify(&trusted, Some(&other)),
            Err(VerifyError::WrongGuid)
        );
    }

    #[test]
    fn a_delegated_key_signs_for_the_provider_until_its_delegation_expires() {
        let provider = Keypair::generate_ed25519();
        let trusted = [provider.public()];
        let gateway = Keypair::generate_ed25519();
        let now = crate::rules::unix_ms(std::time::SystemTime::now());
        let d = Delegation::issue(&provider, gateway.public(), now + 60_000).unwrap();
        assert_eq!(Delegation::decode(&d.encode()).unwrap(), d);
        let signed = object("http://example.com/a", b"hello")
            .sign_delegated(&gateway, &d)
            .unwrap();
        // Its GUID is the provider's, and it verifies as the provider's, on the wire too.
        assert_eq!(
            signed.guid(),
            Guid::new(&provider.public(), "http://example.com/a")
        );
        let back = SignedObject::decode(&signed.encode()).unwrap();
        assert_eq!(back, signed);
        back.verify(&trusted, Some(&signed.guid())).unwrap();
        // So does its freshness record.
        let record = Freshness::decode(&signed.freshness().encode()).unwrap();
        record.verify(&trusted, None).unwrap();

        // Expired: refused, with when.
        let old = Delegation::issue(&provider, gateway.public(), now - 1).unwrap();
        let stale = object("http://example.com/a", b"hello")
            .sign_delegated(&gateway, &old)
            .unwrap();
        assert_eq!(
            stale.verify(&trusted, None),
            Err(VerifyError::Expired(now - 1))
        );
        assert_eq!(
            stale.freshness().verify(&trusted, None),
            Err(VerifyError::Expired(now - 1))
        );
        // A delegation the gateway wrote itself, or one stretched past its expiry.
        let forged = Delegation::issue(&gateway, gateway.public(), now + 60_000).unwrap();
        let mut claimed = object("http://example.com/a", b"hello")
            .sign_delegated(&gateway, &forged)
            .unwrap();
        claimed.provider = provider.public();
        assert_eq!(
            claimed.verify(&trusted, None),
            Err(VerifyError::BadDelegation)
        );
        let mut stretched = signed.clone();
        if let Some(d) = &mut stretched.delegation {
            d.expires_ms += 1;
        }
        assert_eq!(
            stretched.verify(&trusted, None),
            Err(VerifyError::BadDelegation)
        );
        // Another provider's delegation: not trusted here.
        let other = Keypair::generate_ed25519();
        let theirs = Delegation::issue(&other, gateway.public(), now + 60_000).unwrap();
        let foreign = object("http://example.com/a", b"hello")
            .sign_delegated(&gateway, &theirs)
            .unwrap();
        assert!(matches!(
            foreign.verify(&trusted, None),
            Err(VerifyError::Untrusted(_))
        ));
        // Signed by a key other than the one vouched for.
        assert!(object("http://example.com/a", b"x")
            .sign_delegated(&other, &d)
            .is_err());
        let mut swapped = signed.clone();
        swapped.signature = object("http://example.com/a", b"hello")
            .sign(&other)
            .unwrap()
            .signature;
        assert_eq!(
            swapped.verify(&trusted, None),
            Err(VerifyError::BadSignature)
        );
        // Malformed delegations are errors.
        let bytes = d.encode();
        for cut in [0, 3, 5, 20, bytes.len() - 1] {
            assert!(Delegation::decode(&bytes[..cut]).is_err(), "cut {cut}");
        }
    }

    #[test]
    fn a_provider_is_named_by_its_peer_id() {
        let key = Keypair::generate_ed25519().public();
        let id = key.to_peer_id();
        assert_eq!(key_of_peer_id(&id), Some(key));
        let named: libp2p::PeerId = id.to_string().parse().unwrap();
        assert_eq!(key_of_peer_id(&named), key_of_peer_id(&id));
    }

    #[test]
    fn guids_depend_on_key_and_url() {
        let a = Keypair::generate_ed25519().public();
        let b = Keypair::generate_ed25519().public();
        assert_ne!(Guid::new(&a, "http://x/1"), Guid::new(&b, "http://x/1"));
        assert_ne!(Guid::new(&a, "http://x/1"), Guid::new(&a, "http://x/2"));
        assert_eq!(Guid::new(&a, "http://x/1"), Guid::new(&a, "http://x/1"));
        assert!(Guid::from_slice(&[0; 31]).is_err());
    }

    #[test]
    fn bad_encodings_are_errors() {
        let key = Keypair::generate_ed25519();
        let bytes = object("http://example.com/a", b"hello")
            .sign(&key)
            .unwrap()
            .encode();
        for cut in [0, 3, 5, 20, bytes.len() - 1] {
            assert!(SignedObject::decode(&bytes[..cut]).is_err(), "cut {cut}");
        }
        let mut trailing = bytes.clone();
        trailing.push(0);
        assert!(SignedObject::decode(&trailing).is_err());
        let mut format = bytes.clone();
        format[4] = 9;
        assert_eq!(SignedObject::decode(&format), Err(DecodeError::Format(9)));
    }

    #[test]
    fn a_freshness_record_renews_the_held_body_and_nothing_else() {
        let key = Keypair::generate_ed25519();
        let trusted = [key.public()];
        let held = object("http://example.com/a", b"hello").sign(&key).unwrap();
        let mut renewed = held.object.clone();
        renewed.requested_at_ms += 60_000;
        renewed.received_at_ms += 60_000;
        let renewed = renewed.sign(&key).unwrap();
        let record = Freshness::decode(&renewed.freshness().encode()).unwrap();
        assert!(Freshness::is_record(&record.encode()));
        assert!(!Freshness::is_record(&held.encode()));
        assert!(record.encode().len() < 300, "{}", record.encode().len());
        // Applied to the held body: the renewed object, whose signature verifies.
        let applied = record.apply(&held, &trusted).unwrap();
        assert_eq!(applied, renewed);
        applied.verify(&trusted, Some(&held.guid())).unwrap();

        // Another body: refused (the object changed; its body must be fetched).
        let other = object("http://example.com/a", b"bye").sign(&key).unwrap();
        assert_eq!(record.apply(&other, &trusted), Err(VerifyError::OtherBody));
        // Another object: refused.
        let b = object("http://example.com/b", b"hello").sign(&key).unwrap();
        assert_eq!(record.apply(&b, &trusted), Err(VerifyError::WrongGuid));
        // A forged record: a later expiry it was never signed with.
        let mut forged = record.clone();
        forged.head.received_at_ms += 3_600_000;
        assert_eq!(
            forged.apply(&held, &trusted),
            Err(VerifyError::BadSignature)
        );
        // Signed by a key not trusted.
        let stranger = Keypair::generate_ed25519();
        let theirs = object("http://example.com/a", b"hello")
            .sign(&stranger)
            .unwrap();
        assert!(matches!(
            theirs.freshness().verify(&trusted, None),
            Err(VerifyError::Untrusted(_))
        ));
        // Malformed records are errors, never panics.
        let bytes = record.encode();
        for cut in [0, 3, 5, 20, bytes.len() - 1] {
            assert!(Freshness::decode(&bytes[..cut]).is_err(), "cut {cut}");
        }
        assert!(Freshness::decode(&held.encode()).is_err());
    }

    proptest! {
        #[test]
        fn decoding_arbitrary_bytes_never_panics(bytes in proptest::collection::vec(any::<u8>(), 0..512)) {
            let _ = SignedObject::decode(&bytes);
            let mut framed = b"SSCO\x02".to_vec();
            framed.extend_from_slice(&bytes);
            let _ = SignedObject::decode(&framed);
            let mut record = b"SSCF\x02".to_vec();
            record.extend_from_slice(&bytes);
            let _ = Freshness::decode(&record);
        }
    }
}
