//! The OME-XML (schema 2016-06) of a single-image OME-TIFF: one Image whose Pixels say the
//! dimension order, type, sizes, physical sizes and channels, and one TiffData mapping the
//! planes, in that order, to the IFDs from the first. Written in ASCII (non-ASCII characters as
//! character references), since it is a TIFF ImageDescription.

use crate::views::shared::mapping::markup::escape;

/// What the OME-XML describes.
#[derive(Debug, Clone, PartialEq)]
pub struct OmeImage {
    pub name: Option<String>,
    /// One of the six orders `XY` + a permutation of `ZCT`: the planes' order in the file.
    pub dimension_order: String,
    /// An OME pixel type: `uint8` .. `uint32`, `int8` .. `int32`, `float`, `double`.
    pub pixel_type: &'static str,
    /// SizeX, SizeY, SizeZ, SizeC, SizeT.
    pub sizes: [u64; 5],
    /// PhysicalSizeX, Y, Z: value and OME length unit.
    pub physical: [Option<(f64, &'static str)>; 3],
    /// TimeIncrement: value and OME time unit.
    pub time_increment: Option<(f64, &'static str)>,
    /// One name (or none) per channel; empty for unnamed channels.
    pub channel_names: Vec<Option<String>>,
}

const NAMESPACE: &str = "http://www.openmicroscopy.org/Schemas/OME/2016-06";

/// OME's pixel type for a TIFF sample (bits, SampleFormat); OME has no 64-bit integers.
pub fn pixel_type(bits: u16, format: u16) -> Option<&'static str> {
    Some(match (format, bits) {
        (1, 8) => "uint8",
        (1, 16) => "uint16",
        (1, 32) => "uint32",
        (2, 8) => "int8",
        (2, 16) => "int16",
        (2, 32) => "int32",
        (3, 32) => "float",
        (3, 64) => "double",
        _ => return None,
    })
}

/// OME's symbol for an OME-Zarr (UDUNITS-2) length unit.
pub fn length_unit(unit: &str) -> Option<&'static str> {
    Some(match unit {
        "angstrom" => "\u{c5}",
        "picometer" => "pm",
        "nanometer" => "nm",
        "micrometer" | "micron" => "\u{b5}m",
        "millimeter" => "mm",
        "centimeter" => "cm",
        "decimeter" => "dm",
        "meter" => "m",
        "kilometer" => "km",
        "inch" => "in",
        "foot" => "ft",
        "yard" => "yd",
        "mile" => "mi",
        "parsec" => "pc",
        _ => return None,
    })
}

/// OME's symbol for an OME-Zarr (UDUNITS-2) time unit.
pub fn time_unit(unit: &str) -> Option<&'static str> {
    Some(match unit {
        "nanosecond" => "ns",
        "microsecond" => "\u{b5}s",
        "millisecond" => "ms",
        "second" => "s",
        "minute" => "min",
        "hour" => "h",
        "day" => "d",
        _ => return None,
    })
}

/// The OME-XML document.
pub fn ome_xml(image: &OmeImage) -> String {
    let [x, y, z, c, t] = image.sizes;
    let mut pixels = format!(
        "<Pixels ID=\"Pixels:0\" DimensionOrder=\"{}\" Type=\"{}\" BigEndian=\"false\" \
         Interleaved=\"false\" SizeX=\"{x}\" SizeY=\"{y}\" SizeZ=\"{z}\" SizeC=\"{c}\" \
         SizeT=\"{t}\"",
        image.dimension_order, image.pixel_type
    );
    for (axis, physical) in ["X", "Y", "Z"].iter().zip(&image.physical) {
        if let Some((value, unit)) = physical {
            pixels.push_str(&format!(
                " PhysicalSize{axis}=\"{value}\" PhysicalSize{axis}Unit=\"{}\"",
                escape(unit)
            ));
        }
    }
    if let Some((value, unit)) = image.time_increment {
        pixels.push_str(&format!(
            " TimeIncrement=\"{value}\" TimeIncrementUnit=\"{}\"",
            escape(unit)
        ));
    }
    pixels.push('>');
    for i in 0..c {
        let name = image.channel_names.get(i as usize).cloned().flatten();
        let name = name.map(|n| format!(" Name=\"{}\"", escape(&n))).unwrap_or_default();
        pixels.push_str(&format!("<Channel ID=\"Channel:0:{i}\" SamplesPerPixel=\"1\"{name}/>"));
    }
    pixels.push_str(&format!("<TiffData IFD=\"0\" PlaneCount=\"{}\"/>", z * c * t));
    pixels.push_str("</Pixels>");
    let name = image.name.as_ref().map(|n| format!(" Name=\"{}\"", escape(n))).unwrap_or_default();
    format!(
        "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\
         <OME xmlns=\"{NAMESPACE}\" xmlns:xsi=\"http://www.w3.org/2001/XMLSchema-instance\" \
         xsi:schemaLocation=\"{NAMESPACE} {NAMESPACE}/ome.xsd\" Creator=\"zarr-mount\">\
         <Image ID=\"Image:0\"{name}>{pixels}</Image></OME>"
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_image_with_channels_and_physical_sizes() {
        let image = OmeImage {
            name: Some("cells & <more>".into()),
            dimension_order: "XYZCT".into(),
            pixel_type: "uint16",
            sizes: [64, 32, 5, 2, 3],
            physical: [Some((0.5, "\u{b5}m")), Some((0.5, "\u{b5}m")), None],
            time_increment: Some((2.0, "s")),
            channel_names: vec![Some("DAPI".into())],
        };
        let xml = ome_xml(&image);
        assert!(xml.is_ascii());
        assert!(xml.ends_with("</OME>"));
        assert!(xml.contains("<Image ID=\"Image:0\" Name=\"cells &amp; &lt;more&gt;\">"));
        assert!(xml.contains(
            "DimensionOrder=\"XYZCT\" Type=\"uint16\" BigEndian=\"false\" Interleaved=\"false\" \
             SizeX=\"64\" SizeY=\"32\" SizeZ=\"5\" SizeC=\"2\" SizeT=\"3\" \
             PhysicalSizeX=\"0.5\" PhysicalSizeXUnit=\"&#181;m\" PhysicalSizeY=\"0.5\" \
             PhysicalSizeYUnit=\"&#181;m\" TimeIncrement=\"2\" TimeIncrementUnit=\"s\">"
        ));
        assert!(xml.contains(
            "<Channel ID=\"Channel:0:0\" SamplesPerPixel=\"1\" Name=\"DAPI\"/>\
             <Channel ID=\"Channel:0:1\" SamplesPerPixel=\"1\"/>\
             <TiffData IFD=\"0\" PlaneCount=\"30\"/></Pixels>"
        ));
    }

    #[test]
    fn types_and_units() {
        assert_eq!(pixel_type(16, 2), Some("int16"));
        assert_eq!(pixel_type(64, 3), Some("double"));
        assert_eq!(pixel_type(64, 1), None);
        assert_eq!(length_unit("micrometer"), Some("\u{b5}m"));
        assert_eq!(length_unit("furlong"), None);
        assert_eq!(time_unit("millisecond"), Some("ms"));
    }
}
