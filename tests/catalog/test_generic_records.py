"""Every package of every kind is a generic record of the snapshot, built by its analyzer with
its purl: a Debian package (dpkg), a distribution of a Python environment (beside its typed
``Distribution``) and a dist-info record outside every environment. An image written as an
OCI layout is audited as any image is; what must come out is read off the files by hand."""

from __future__ import annotations

from pathlib import Path

from packageurl import PackageURL

from pinguard.audit.pipeline import audit_image
from pinguard.catalog.python import with_environments
from pinguard.models import AuditResult, Environment
from pinguard.testing.images import ImageWriter, layer_tar
from tests.catalog.test_dpkg import STATUS_TEXT

SITE = "usr/local/lib/python3.11/site-packages"


def _metadata(name: str, version: str) -> bytes:
    return f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n\n".encode()


def _audit(tmp_path: Path) -> AuditResult:
    files = {
        "etc/os-release": b'ID=debian\nVERSION_ID="12"\n',
        "var/lib/dpkg/status": STATUS_TEXT.encode(),
        f"{SITE}/Foo_Bar-1.0+local.dist-info/METADATA": _metadata("Foo_Bar", "1.0+local"),
        f"{SITE}/Foo_Bar-1.0+local.dist-info/INSTALLER": b"pip\n",
        "usr/local/cuda/dist-info/nvidia_cublas-13.0.0.dist-info/METADATA": _metadata(
            "nvidia-cublas", "13.0.0"
        ),
    }
    writer = ImageWriter(tmp_path / "layout")
    image = writer.image([writer.layer(layer_tar(files, parents=True))], [{"created_by": "RUN"}])
    index, _ = writer.index([image], tag="t")
    writer.write_layout(index)
    return audit_image(f"oci:{tmp_path / 'layout'}:t")


def test_every_package_is_a_generic_record_with_its_purl(tmp_path: Path) -> None:
    final = _audit(tmp_path).final
    rows = [(p.kind, p.name, p.owner, p.ref, p.purl) for p in final.packages]
    assert rows == [
        (
            "deb",
            "libc6",
            None,
            "deb:libc6:amd64",
            "pkg:deb/debian/libc6@2.36-9%2Bdeb12u10?arch=amd64&distro=debian-12",
        ),
        (
            "deb",
            "libc6",
            None,
            "deb:libc6:arm64",
            "pkg:deb/debian/libc6@2.36-9%2Bdeb12u10?arch=arm64&distro=debian-12",
        ),
        (
            "deb",
            "libnccl2",
            None,
            "deb:libnccl2:amd64",
            "pkg:deb/debian/libnccl2@2.30.3-1%2Bcuda13.0?arch=amd64&distro=debian-12",
        ),
        (
            "deb",
            "python3.11",
            None,
            "deb:python3.11:amd64",
            "pkg:deb/debian/python3.11@3.11.2-6%2Bdeb12u6?arch=amd64&distro=debian-12",
        ),
        (
            "python",
            "nvidia-cublas",
            "/usr/local/cuda",
            "python:/usr/local/cuda/dist-info/nvidia_cublas-13.0.0.dist-info",
            "pkg:pypi/nvidia-cublas@13.0.0",
        ),
        (
            "python",
            "foo-bar",
            f"/{SITE}",
            f"python:/{SITE}/Foo_Bar-1.0+local.dist-info",
            "pkg:pypi/foo-bar@1.0%2Blocal",
        ),
    ]
    for package in final.packages:  # the strings the SBOM library reads and writes back
        assert package.purl is not None
        assert PackageURL.from_string(package.purl).to_string() == package.purl
    # the typed views: dpkg's as DebPackage, the environment's distribution as Distribution
    assert [(d.name, d.architecture) for d in final.debs][:2] == [
        ("libc6", "amd64"),
        ("libc6", "arm64"),
    ]
    (env,) = final.environments
    assert [d.metadata_path for d in env.distributions] == [f"/{SITE}/Foo_Bar-1.0+local.dist-info"]
    # what no typed view lists: only the record outside every environment
    assert [p.name for p in final.other_packages()] == ["nvidia-cublas"]


def test_with_environments_keeps_records_and_environments_together(tmp_path: Path) -> None:
    """Replacing the environments (plan, predict) replaces their distributions' records and
    keeps every other record."""
    final = _audit(tmp_path).final
    emptied = with_environments(final, [Environment(f"/{SITE}", "3.11")])
    assert [p.name for p in emptied.packages if p.kind == "python"] == ["nvidia-cublas"]
    assert len(emptied.debs) == 4
    again = with_environments(emptied, final.environments)
    assert again.packages == final.packages
