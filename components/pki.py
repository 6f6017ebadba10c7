"""The program's own certificate authorities and the server certificates they issue (pulumi_tls, kept in
the stack's state: a `pulumi up` within a certificate's early-renewal window issues a new one)."""

from __future__ import annotations

from collections.abc import Sequence

import pulumi
import pulumi_tls as tls


def own_ca(prefix: str, common_name: str, validity_hours: int, opts: pulumi.ResourceOptions):
    """A self-signed CA (ECDSA P-384): its key `<prefix>-key` and certificate `<prefix>`."""
    key = tls.PrivateKey(f"{prefix}-key", algorithm="ECDSA", ecdsa_curve="P384", opts=opts)
    ca = tls.SelfSignedCert(
        prefix,
        private_key_pem=key.private_key_pem,
        is_ca_certificate=True,
        subject=tls.SelfSignedCertSubjectArgs(common_name=common_name),
        validity_period_hours=validity_hours,
        allowed_uses=["cert_signing", "crl_signing"],
        opts=opts,
    )
    return key, ca


def issued_certificate(
    prefix: str,
    ca: tuple[tls.PrivateKey, tls.SelfSignedCert],
    common_name: str,
    dns_names: Sequence[str],
    ip_addresses: Sequence[str],
    *,
    validity_hours: int,
    early_renewal_hours: int,
    uses: Sequence[str],
    opts: pulumi.ResourceOptions,
):
    """A certificate (ECDSA P-256) that `ca` signs: key `<prefix>-key`, request `<prefix>-csr`,
    certificate `<prefix>-cert`."""
    ca_key, ca_cert = ca
    key = tls.PrivateKey(f"{prefix}-key", algorithm="ECDSA", ecdsa_curve="P256", opts=opts)
    request = tls.CertRequest(
        f"{prefix}-csr",
        private_key_pem=key.private_key_pem,
        subject=tls.CertRequestSubjectArgs(common_name=common_name),
        dns_names=list(dns_names),
        ip_addresses=list(ip_addresses),
        opts=opts,
    )
    cert = tls.LocallySignedCert(
        f"{prefix}-cert",
        cert_request_pem=request.cert_request_pem,
        ca_private_key_pem=ca_key.private_key_pem,
        ca_cert_pem=ca_cert.cert_pem,
        validity_period_hours=validity_hours,
        early_renewal_hours=early_renewal_hours,
        allowed_uses=list(uses),
        opts=opts,
    )
    return key, cert
