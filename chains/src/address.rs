//! EVM addresses: keccak256, EIP-55 checksums, validation and the CREATE2 deposit address
//! rule of DECISIONS.md section 9.

use tiny_keccak::{Hasher, Keccak};
use uuid::Uuid;

/// Keccak-256 of `data` (the Ethereum variant, not NIST SHA3-256).
pub fn keccak256(data: &[u8]) -> [u8; 32] {
    let mut k = Keccak::v256();
    k.update(data);
    let mut out = [0u8; 32];
    k.finalize(&mut out);
    out
}

/// The deterministic deployment proxy present at the same address on most EVM chains
/// (CHAINS.md); the factory is deployed through it so it has one address everywhere.
pub const DEPLOYMENT_PROXY: [u8; 20] = hex_array("4e59b44847b379578588920ca78fbf26c0b4956c");

/// Salt under which the factory is deployed through [`DEPLOYMENT_PROXY`].
pub const FACTORY_SALT: [u8; 32] = [0u8; 32];

/// The pinned contracts: `chains/contracts/Forwarder.sol` compiled by `compile.js` (compiler
/// version and settings inside). A test recompiles and compares.
pub const PINNED_CONTRACTS_JSON: &str = include_str!("../contracts/Forwarder.json");

fn pinned(name: &str) -> &'static [u8] {
    static CODE: std::sync::OnceLock<(Vec<u8>, Vec<u8>)> = std::sync::OnceLock::new();
    let (fwd, fac) = CODE.get_or_init(|| {
        let v: serde_json::Value =
            serde_json::from_str(PINNED_CONTRACTS_JSON).expect("pinned contracts JSON");
        let get = |n: &str| {
            hex::decode(v["contracts"][n].as_str().expect("pinned contract"))
                .expect("pinned bytecode hex")
        };
        (get("Forwarder"), get("ForwarderFactory"))
    });
    if name == "Forwarder" {
        fwd
    } else {
        fac
    }
}

/// Creation code of the forwarder (no constructor arguments).
pub fn forwarder_init_code() -> &'static [u8] {
    pinned("Forwarder")
}

/// Creation code of the factory for `treasury`: bytecode ‖ abi.encode(treasury).
pub fn factory_init_code(treasury: &[u8; 20]) -> Vec<u8> {
    let mut code = pinned("ForwarderFactory").to_vec();
    code.extend_from_slice(&[0u8; 12]);
    code.extend_from_slice(treasury);
    code
}

/// The published mnemonic of test mode's master key (the development mnemonic of Anvil and
/// Hardhat). Test mode signs real EIP-1559 transactions for its simulated chains with the
/// key at `m/44'/60'/0'/0/0` of it (`appliance_signer::Signer::test_mode`); everybody knows
/// this key, so nothing derived from it may ever hold real funds.
pub const TEST_MODE_MNEMONIC: &str = "test test test test test test test test test test test junk";

/// Test mode's treasury (master wallet): the address of the key of [`TEST_MODE_MNEMONIC`]
/// (`0xf39Fd6e51aad88F6F4ce6aB8827279cffFb92266`). Test-mode deposit addresses are derived
/// under the factory of this treasury, and the simulated chains' genesis funds it with
/// native coin for gas.
pub fn test_treasury() -> [u8; 20] {
    hex_array("f39fd6e51aad88f6f4ce6ab8827279cfffb92266")
}

/// keccak256 of the factory's creation code for `treasury`. Together with [`FACTORY_SALT`]
/// it fixes the factory address on every EVM chain (EIP-1014 under the deployment proxy).
pub fn factory_init_code_hash(treasury: &[u8; 20]) -> [u8; 32] {
    keccak256(&factory_init_code(treasury))
}

/// keccak256 of the forwarder's creation code (no constructor arguments: the forwarder
/// reads its sweep destination from the factory, CHAINS.md), so the deposit address depends
/// only on (factory, salt).
pub fn forwarder_init_code_hash() -> [u8; 32] {
    static H: std::sync::OnceLock<[u8; 32]> = std::sync::OnceLock::new();
    *H.get_or_init(|| keccak256(forwarder_init_code()))
}

/// The `N` bytes of the hex string `s` (no `0x`), at compile time; panics on a character
/// that is not a hex digit.
pub(crate) const fn hex_array<const N: usize>(s: &str) -> [u8; N] {
    let b = s.as_bytes();
    let mut out = [0u8; N];
    let mut i = 0;
    while i < N {
        out[i] = (hexval(b[2 * i]) << 4) | hexval(b[2 * i + 1]);
        i += 1;
    }
    out
}

const fn hexval(c: u8) -> u8 {
    match c {
        b'0'..=b'9' => c - b'0',
        b'a'..=b'f' => c - b'a' + 10,
        b'A'..=b'F' => c - b'A' + 10,
        _ => panic!("not a hex digit"),
    }
}

/// EIP-1014: `keccak256(0xff ‖ deployer ‖ salt ‖ init_code_hash)[12..]`.
pub fn create2(deployer: &[u8; 20], salt: &[u8; 32], init_code_hash: &[u8; 32]) -> [u8; 20] {
    let mut buf = [0u8; 85];
    buf[0] = 0xff;
    buf[1..21].copy_from_slice(deployer);
    buf[21..53].copy_from_slice(salt);
    buf[53..85].copy_from_slice(init_code_hash);
    let h = keccak256(&buf);
    let mut out = [0u8; 20];
    out.copy_from_slice(&h[12..]);
    out
}

/// The forwarder factory's address for `treasury`: the same on every EVM chain.
///
/// Memoised for up to [`FACTORY_MEMO`] treasuries (an appliance has two: test mode's and
/// the live master's): hashing the factory's creation code was about 5% of the request
/// threads' time when creating invoices (docs/performance.md).
pub fn factory_address(treasury: &[u8; 20]) -> [u8; 20] {
    use std::sync::RwLock;
    static MEMO: RwLock<Vec<([u8; 20], [u8; 20])>> = RwLock::new(Vec::new());
    let hit = MEMO
        .read()
        .unwrap_or_else(|e| e.into_inner())
        .iter()
        .find(|(t, _)| t == treasury)
        .map(|(_, a)| *a);
    if let Some(a) = hit {
        return a;
    }
    let addr = create2(
        &DEPLOYMENT_PROXY,
        &FACTORY_SALT,
        &factory_init_code_hash(treasury),
    );
    let mut memo = MEMO.write().unwrap_or_else(|e| e.into_inner());
    if memo.len() < FACTORY_MEMO && !memo.iter().any(|(t, _)| t == treasury) {
        memo.push((*treasury, addr));
    }
    addr
}

/// How many treasuries' factory addresses [`factory_address`] keeps.
const FACTORY_MEMO: usize = 8;

/// Salt of a customer's forwarder: `keccak256(project_id ‖ customer_id)` (16 bytes each).
/// The chain id is left out so the address is identical on every EVM chain.
pub fn deposit_salt(project_id: Uuid, customer_id: Uuid) -> [u8; 32] {
    let mut buf = [0u8; 32];
    buf[..16].copy_from_slice(project_id.as_bytes());
    buf[16..].copy_from_slice(customer_id.as_bytes());
    keccak256(&buf)
}

/// A customer's deposit address under `factory`, EIP-55 checksummed.
pub fn deposit_address_under(factory: &[u8; 20], project_id: Uuid, customer_id: Uuid) -> String {
    let a = create2(
        factory,
        &deposit_salt(project_id, customer_id),
        &forwarder_init_code_hash(),
    );
    to_checksum(&a)
}

/// Domain tag of a funding-address salt (DECISIONS.md section 13: funding salts are
/// domain-separated from customer, invoice and project salts). Customer, invoice and
/// project (customer nil) salts hash exactly 32 bytes (two ids); a funding salt hashes this
/// 32-byte tag before the project id (48 bytes), so no funding salt can equal another
/// kind's whatever the ids.
pub const FUNDING_SALT_TAG: [u8; 32] = *b"appliance:billing-funding-addr:1";

/// Salt of a project's billing funding forwarder: `keccak256(FUNDING_SALT_TAG ‖
/// project_id)`. Like a customer's, chain-independent: the funding address is the same on
/// every EVM chain.
pub fn funding_salt(project_id: Uuid) -> [u8; 32] {
    let mut buf = [0u8; 48];
    buf[..32].copy_from_slice(&FUNDING_SALT_TAG);
    buf[32..].copy_from_slice(project_id.as_bytes());
    keccak256(&buf)
}

/// A project's billing funding address under `factory`, EIP-55 checksummed.
pub fn funding_address_under(factory: &[u8; 20], project_id: Uuid) -> String {
    let a = create2(
        factory,
        &funding_salt(project_id),
        &forwarder_init_code_hash(),
    );
    to_checksum(&a)
}

/// A customer's deposit address in test mode (under the factory of [`test_treasury`]).
pub fn deposit_address(project_id: Uuid, customer_id: Uuid) -> String {
    deposit_address_under(&factory_address(&test_treasury()), project_id, customer_id)
}

/// EIP-55 mixed-case checksum encoding, `0x`-prefixed.
pub fn to_checksum(addr: &[u8; 20]) -> String {
    let lower = hex::encode(addr);
    let hash = keccak256(lower.as_bytes());
    let mut out = String::with_capacity(42);
    out.push_str("0x");
    for (i, c) in lower.chars().enumerate() {
        let nibble = (hash[i / 2] >> (if i % 2 == 0 { 4 } else { 0 })) & 0x0f;
        if c.is_ascii_alphabetic() && nibble >= 8 {
            out.push(c.to_ascii_uppercase());
        } else {
            out.push(c);
        }
    }
    out
}

/// Why an EVM address was refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AddressError {
    /// Not `0x` followed by 40 hex digits.
    Format,
    /// Mixed case that does not match the EIP-55 checksum.
    Checksum,
    /// The zero address can never be a destination.
    Zero,
}

impl std::fmt::Display for AddressError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            AddressError::Format => "must be 0x followed by 40 hexadecimal characters",
            AddressError::Checksum => "mixed-case address fails its EIP-55 checksum",
            AddressError::Zero => "the zero address cannot receive funds",
        })
    }
}

/// Parses an EVM address. All-lower or all-upper hex is accepted as is; mixed case must
/// carry a valid EIP-55 checksum.
pub fn parse_evm_address(s: &str) -> Result<[u8; 20], AddressError> {
    let body = s.strip_prefix("0x").ok_or(AddressError::Format)?;
    if body.len() != 40 || !body.bytes().all(|c| c.is_ascii_hexdigit()) {
        return Err(AddressError::Format);
    }
    let mut out = [0u8; 20];
    hex::decode_to_slice(body, &mut out).map_err(|_| AddressError::Format)?;
    let has_lower = body.bytes().any(|c| c.is_ascii_lowercase());
    let has_upper = body.bytes().any(|c| c.is_ascii_uppercase());
    if has_lower && has_upper && to_checksum(&out) != s {
        return Err(AddressError::Checksum);
    }
    if out == [0u8; 20] {
        return Err(AddressError::Zero);
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn funding_salts_are_their_own_domain() {
        let p = Uuid::now_v7();
        let f = funding_salt(p);
        assert_eq!(f, funding_salt(p), "deterministic");
        assert_ne!(f, funding_salt(Uuid::now_v7()), "one per project");
        // Never the salt of the project (customer nil), of a customer or of an invoice
        // named by the same ids.
        assert_ne!(f, deposit_salt(p, Uuid::nil()));
        assert_ne!(f, deposit_salt(p, p));
        assert_ne!(f, deposit_salt(Uuid::nil(), p));
        let factory = factory_address(&test_treasury());
        assert_ne!(
            funding_address_under(&factory, p),
            deposit_address_under(&factory, p, Uuid::nil())
        );
    }

    #[test]
    fn keccak_of_empty_is_the_known_constant() {
        assert_eq!(
            hex::encode(keccak256(b"")),
            "c5d2460186f7233c927e7db2dcc703c0e500b653ca82273b7bfad8045d85a470"
        );
    }

    #[test]
    fn eip55_reference_vectors() {
        for s in [
            "0x5aAeb6053F3E94C9b9A09f33669435E7Ef1BeAed",
            "0xfB6916095ca1df60bB79Ce92cE3Ea74c37c5d359",
            "0xdbF03B407c01E7cD3CBea99509d93f8DDDC8C6FB",
            "0xD1220A0cf47c7B9Be7A2E6BA89F429762e7b9aDb",
        ] {
            let a = parse_evm_address(s).unwrap();
            assert_eq!(to_checksum(&a), s);
        }
        assert_eq!(
            parse_evm_address("0x5aAeb6053F3E94C9b9A09f33669435E7Ef1BeAeD"),
            Err(AddressError::Checksum)
        );
        assert!(parse_evm_address("0x5aaeb6053f3e94c9b9a09f33669435e7ef1beaed").is_ok());
        assert_eq!(parse_evm_address("0x12"), Err(AddressError::Format));
        assert_eq!(
            parse_evm_address(&format!("0x{}", "0".repeat(40))),
            Err(AddressError::Zero)
        );
    }

    #[test]
    fn create2_matches_eip1014_example_1() {
        // EIP-1014 example 1: deployer 0x00..00, salt 0x00..00, init_code 0x00.
        let a = create2(&[0u8; 20], &[0u8; 32], &keccak256(&[0u8]));
        assert_eq!(
            to_checksum(&a),
            "0x4D1A2e2bB4F88F0250f26Ffff098B0b30B26BF38"
        );
    }

    #[test]
    fn deposit_address_is_deterministic_and_per_customer() {
        let p = Uuid::now_v7();
        let c1 = Uuid::now_v7();
        let c2 = Uuid::now_v7();
        assert_eq!(deposit_address(p, c1), deposit_address(p, c1));
        assert_ne!(deposit_address(p, c1), deposit_address(p, c2));
        assert!(parse_evm_address(&deposit_address(p, c1)).is_ok());
    }

    #[test]
    fn memoised_factory_address_is_the_computed_one_past_the_memo() {
        for i in 0..(FACTORY_MEMO as u8 + 4) {
            let t = [i.wrapping_mul(37).wrapping_add(1); 20];
            let direct = create2(
                &DEPLOYMENT_PROXY,
                &FACTORY_SALT,
                &factory_init_code_hash(&t),
            );
            assert_eq!(factory_address(&t), direct);
            assert_eq!(
                factory_address(&t),
                direct,
                "second call, from the memo or not"
            );
        }
    }

    #[test]
    fn factory_address_depends_on_the_treasury_only() {
        let t1 = [1u8; 20];
        let t2 = [2u8; 20];
        assert_eq!(factory_address(&t1), factory_address(&t1));
        assert_ne!(factory_address(&t1), factory_address(&t2));
        let p = Uuid::now_v7();
        let c = Uuid::now_v7();
        assert_ne!(
            deposit_address_under(&factory_address(&t1), p, c),
            deposit_address_under(&factory_address(&t2), p, c)
        );
    }

    /// The shipped bytecode is what `compile.js` produces from the shipped source with the
    /// npm `solc` package (installed by `scripts/install-test-deps.sh`). Fails when node or
    /// solc is missing: the pin must be checked, not skipped.
    #[test]
    fn pinned_bytecode_matches_fresh_compile() {
        let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR"));
        let out = std::process::Command::new("node")
            .arg(root.join("contracts/compile.js"))
            .arg(root.join("contracts/Forwarder.sol"))
            .output()
            .expect("node must be installed (scripts/install-test-deps.sh)");
        assert!(
            out.status.success(),
            "compile.js failed (run scripts/install-test-deps.sh): {}",
            String::from_utf8_lossy(&out.stderr)
        );
        let fresh: serde_json::Value = serde_json::from_slice(&out.stdout).expect("json");
        let pinned: serde_json::Value = serde_json::from_str(PINNED_CONTRACTS_JSON).expect("json");
        assert_eq!(fresh, pinned, "chains/contracts/Forwarder.json is stale");
        assert!(pinned["compiler"].as_str().unwrap().starts_with("0.8.37+"));
        // No PUSH0 anywhere would need a disassembler; evmVersion paris is pinned instead.
        assert_eq!(pinned["settings"]["evmVersion"], "paris");
    }
}
