//! The Talos Image Factory, as ferro.talos uses it: a schematic (the extensions, kernel arguments,
//! META values and overlay an image is built with), its canonical YAML and ID as the factory
//! computes them, the factory's HTTP API, and the URLs of the installer and boot assets.
//!
//! Upstream: siderolabs/image-factory v1.5.0 (`pkg/schematic/schematic.go`,
//! `internal/frontend/http/`), and the URL forms of siderolabs/terraform-provider-talos
//! (`talos_image_factory_urls`) with Talos's `pkg/machinery/platforms`.

mod client;
mod error;
mod http;
mod schematic;
mod urls;

pub use client::{ExtensionInfo, Factory, OverlayInfo};
pub use error::{FactoryError, FactoryErrorKind};
pub use schematic::{MetaValue, Overlay, Schematic};
pub use urls::{Architecture, BootAssets, PLATFORMS, Platform, SBCS, Sbc, Target, default_pxe_url};
