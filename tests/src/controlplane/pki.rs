//! The run's certificates, as files: a CA, the apiserver's serving pair (localhost,
//! `kubernetes.default.svc`, 127.0.0.1), the admin's client pair (group
//! `system:masters`) and the service-account signing key. ECDSA P-256 throughout (ring
//! generates no RSA keys; the Python fixture's service-account key is RSA, the
//! apiserver takes either).

use std::path::{Path, PathBuf};

use anyhow::Context as _;
use rcgen::{
    BasicConstraints, CertificateParams, DistinguishedName, DnType, ExtendedKeyUsagePurpose, IsCa, Issuer, KeyPair,
    KeyUsagePurpose,
};

/// Where [`make`] wrote each file.
pub struct Pki {
    pub ca: PathBuf,
    pub serving_cert: PathBuf,
    pub serving_key: PathBuf,
    pub admin_cert: PathBuf,
    pub admin_key: PathBuf,
    /// The service-account token signing key (PKCS#8), for
    /// `--service-account-signing-key-file`.
    pub sa_key: PathBuf,
    /// Its public key, for `--service-account-key-file` (the apiserver's public-key
    /// reader takes an EC key only as SEC 1 or as a public key, not as PKCS#8).
    pub sa_pub: PathBuf,
}

fn name(cn: &str, org: Option<&str>) -> DistinguishedName {
    let mut dn = DistinguishedName::new();
    dn.push(DnType::CommonName, cn);
    if let Some(org) = org {
        dn.push(DnType::OrganizationName, org);
    }
    dn
}

/// Makes the files in `dir` (created), readable by the owner only.
pub fn make(dir: &Path) -> anyhow::Result<Pki> {
    std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;

    let ca_key = KeyPair::generate()?;
    let mut ca_params = CertificateParams::default();
    ca_params.distinguished_name = name("sluice-test-ca", None);
    ca_params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    ca_params.key_usages =
        vec![KeyUsagePurpose::DigitalSignature, KeyUsagePurpose::KeyCertSign, KeyUsagePurpose::CrlSign];
    let ca = ca_params.self_signed(&ca_key)?;
    let issuer = Issuer::new(ca_params, &ca_key);

    let serving_key = KeyPair::generate()?;
    let mut serving_params = CertificateParams::new(vec![
        "localhost".to_string(),
        "kubernetes".to_string(),
        "kubernetes.default.svc".to_string(),
        "127.0.0.1".to_string(),
    ])?;
    serving_params.distinguished_name = name("kube-apiserver", None);
    serving_params.key_usages = vec![KeyUsagePurpose::DigitalSignature];
    serving_params.extended_key_usages = vec![ExtendedKeyUsagePurpose::ServerAuth];
    let serving = serving_params.signed_by(&serving_key, &issuer)?;

    let admin_key = KeyPair::generate()?;
    let mut admin_params = CertificateParams::default();
    admin_params.distinguished_name = name("admin", Some("system:masters"));
    admin_params.key_usages = vec![KeyUsagePurpose::DigitalSignature];
    admin_params.extended_key_usages = vec![ExtendedKeyUsagePurpose::ClientAuth];
    let admin = admin_params.signed_by(&admin_key, &issuer)?;

    let sa_key = KeyPair::generate()?;

    let pki = Pki {
        ca: dir.join("ca.crt"),
        serving_cert: dir.join("serving.crt"),
        serving_key: dir.join("serving.key"),
        admin_cert: dir.join("admin.crt"),
        admin_key: dir.join("admin.key"),
        sa_key: dir.join("sa.key"),
        sa_pub: dir.join("sa.pub"),
    };
    for (path, pem) in [
        (&pki.ca, ca.pem()),
        (&pki.serving_cert, serving.pem()),
        (&pki.serving_key, serving_key.serialize_pem()),
        (&pki.admin_cert, admin.pem()),
        (&pki.admin_key, admin_key.serialize_pem()),
        (&pki.sa_key, sa_key.serialize_pem()),
        (&pki.sa_pub, sa_key.public_key_pem()),
    ] {
        super::write_private(path, pem.as_bytes())?;
    }
    Ok(pki)
}
